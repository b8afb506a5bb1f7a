"""A replicated run costs its on-chip exchanges on replica 0's tiles.

``ReplicaSteps._replica_cost`` costs an exchange whose tiles are all replica 0's with
the stock exchange model on a machine of one replica's IPUs. The trace must be the one
of the exchange costed on the whole machine: the same fingerprint, records, per-tile
arrays, and the same profile figures from each record's totals; an exchange that names
another replica's tile, or a model of the user's, is costed on the whole machine.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from ipusim import ir
from ipusim.config import load_config
from ipusim.dataplane import ScriptedDataPlane
from ipusim.machine import Machine
from ipusim.machine_replicas import ReplicaSteps
from ipusim.profile.execution import _step_entry
from ipusim.timing import StaticExchange, TimingModel

TPI = 8  # tiles per IPU of the tiny preset


def _exchanges(rng, replica_tiles: int, count: int) -> list[ir.Step]:
    """Random exchanges on replica 0's tiles, as transfers (broadcasts among them) and
    as per-tile totals (bytes shared with the bus partner on some), with compute
    steps and internal syncs between them."""
    steps: list[ir.Step] = []
    tiles = np.arange(replica_tiles)
    for k in range(count):
        steps.append(
            ir.Compute(
                name=f"cs{k}", vertex_tile=tiles, vertex_cycles=rng.integers(5, 500, tiles.size)
            )
        )
        if k % 2:
            n = int(rng.integers(1, 3 * replica_tiles))
            messages = int(rng.integers(1, n + 1))  # a message's transfers: one source, size
            source = rng.integers(0, replica_tiles, messages)
            size = rng.integers(1, 5000, messages)
            msg = np.sort(rng.integers(0, messages, n))
            steps.append(
                ir.Exchange(
                    name=f"ex{k}",
                    src_tile=source[msg],
                    dst_tile=source[msg] // TPI * TPI + rng.integers(0, TPI, n),  # its IPU
                    num_bytes=size[msg],
                    message=msg,
                )
            )
        else:
            some = np.flatnonzero(rng.random(replica_tiles) < 0.6)
            received = rng.integers(0, 9000, some.size)
            steps.append(
                ir.Exchange(
                    name=f"ex{k}",
                    tile=some,
                    bytes_sent=rng.integers(0, 9000, some.size),
                    bytes_received=received,
                    messages_sent=rng.integers(0, 9, some.size),
                    messages_received=rng.integers(0, 9, some.size),
                    max_distance=rng.integers(0, 40, some.size),
                    bytes_shared=received // 2 if k % 4 == 0 else None,
                )
            )
        steps.append(ir.Sync(name=f"internal{k}", sync_kind="internal"))
    steps.append(ir.Sync(name="external", sync_kind="external"))
    return steps


def _run(cfg, program, apart: bool, monkeypatch, timing=None):
    """The trace of ``program``, exchanges costed on replica 0's tiles or (``apart``
    False) on the whole machine; with the costs the run found apart."""
    found: list = []
    real = ReplicaSteps._exchange_cost

    def cost(self, step):
        got = real(self, step) if apart else None
        found.append(got)
        return got

    monkeypatch.setattr(ReplicaSteps, "_exchange_cost", cost)
    machine = Machine(cfg, timing=timing)
    trace = machine.run(program, data_plane=ScriptedDataPlane(None))
    return trace, found


def _assert_same(a, b, num_tiles: int):
    assert a.fingerprint() == b.fingerprint()
    for ra, rb in zip(a.records, b.records, strict=True):
        assert (ra.name, ra.first_cycle, ra.last_cycle) == (rb.name, rb.first_cycle, rb.last_cycle)
        np.testing.assert_array_equal(ra.tile_cycles, rb.tile_cycles)
        assert _step_entry(ra, num_tiles, 0, 0, 1) == _step_entry(rb, num_tiles, 0, 0, 1)
    np.testing.assert_array_equal(a.tile_end_cycles, b.tile_end_cycles)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("model", ["static", "phase"])
def test_exchanges_on_replica_zero_cost_what_the_whole_machine_gives(seed, model, monkeypatch):
    rng = np.random.default_rng(seed)
    num_ipus, replicas = [(4, 4), (4, 2), (8, 2)][seed % 3]
    cfg = load_config(
        "tiny",
        overrides={
            "num_ipus": num_ipus,
            "exchange.model": model,
            "exchange.tiles_per_shared_bus": 2 if seed % 2 else 1,
        },
    )
    replica_tiles = num_ipus // replicas * TPI
    body = ir.Block(_exchanges(rng, replica_tiles, 6), "step")
    program = ir.Program(entries=(ir.Repeat(2, body),), replicas=replicas)
    fast, apart = _run(cfg, program, True, monkeypatch)
    full, _ = _run(cfg, program, False, monkeypatch)
    _assert_same(fast, full, cfg.num_tiles)
    assert apart and all(c is not None and c.cycles.size == replica_tiles for c in apart)
    for rec in fast.records:  # the totals of replica 0's tiles, in the record
        if rec.kind == "exchange":
            assert rec.details.bytes_received.size == replica_tiles


def test_an_exchange_beyond_replica_zero_or_a_users_model_is_costed_whole():
    """(A validated replicated program names replica 0's tiles only; the cost does not
    rely on it.)"""
    cfg = load_config("tiny", overrides={"num_ipus": 4})
    own = ir.Exchange(name="own", src_tile=[0, 3], dst_tile=[5, 1], num_bytes=[64, 96])
    beyond = ir.Exchange(name="beyond", src_tile=[0, 9], dst_tile=[5, 12], num_bytes=[64, 96])
    totals = ir.Exchange(name="totals", tile=[2, 8], bytes_sent=[5, 6], bytes_received=[7, 8])

    class Mine(StaticExchange):
        pass

    for timing, costed in ((TimingModel(cfg), True), (TimingModel(cfg, exchange=Mine(cfg)), False)):
        run = SimpleNamespace(
            timing=timing, cfg=cfg, replica_ipus=1, replica_tiles=TPI, _exchange_apart=None
        )
        got = ReplicaSteps._exchange_cost(run, own)
        if costed:
            whole = timing.cost(own).cycles
            assert got.cycles.size == TPI and got.cycles.tolist() == whole[:TPI].tolist()
        else:
            assert got is None
        assert ReplicaSteps._exchange_cost(run, beyond) is None
        assert ReplicaSteps._exchange_cost(run, totals) is None
