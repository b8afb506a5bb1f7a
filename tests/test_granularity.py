"""Property: one SimPy process per tile gives the same trace as one per IPU."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ipusim import ir
from ipusim.config import load_config, with_overrides
from ipusim.machine import Machine


class AlternatingDataPlane:
    """Answers predicate p on its k-th ask with (k + p) % 3 (deterministic)."""

    def __init__(self) -> None:
        self.asks = 0
        self.applied: list[int] = []

    def apply(self, effect: int) -> None:
        self.applied.append(effect)

    def predicate(self, predicate: int) -> int:
        self.asks += 1
        return (self.asks + predicate) % 3


def random_step(rng: np.random.Generator, cfg, k: int, replicas: int = 1) -> ir.Step:
    n, tpi = cfg.num_tiles // replicas, cfg.tile.tiles_per_ipu
    ipus = cfg.num_ipus // replicas  # of replica 0, which the steps name
    choice = rng.integers(0, 7 if cfg.num_ipus > 1 else 4)
    if choice == 5:
        kind = ["internal", "external"][int(rng.integers(0, 2))]
        scope = rng.choice(ipus, size=int(rng.integers(1, ipus + 1)), replace=False)
        return ir.Sync(name=f"sync{k}", sync_kind=kind, ipus=scope.tolist())
    if choice == 6:  # collectives name machine-wide IPUs
        members = rng.permutation(cfg.num_ipus)[: int(rng.integers(1, cfg.num_ipus + 1))]
        cut = int(rng.integers(1, members.size + 1))
        groups = [members[:cut].tolist(), members[cut:].tolist()]
        groups = [g for g in groups if g]
        return ir.Collective(
            name=f"coll{k}",
            effect=k,
            op=str(rng.choice(ir.COLLECTIVE_OPS)),
            algorithm=str(rng.choice(ir.COLLECTIVE_ALGORITHMS)),
            groups=groups,
            num_bytes=rng.integers(0, 50_000, len(groups)).tolist(),
        )
    if choice == 4 and ipus == 1:
        choice = 2
    if choice == 0:
        nv = int(rng.integers(0, 60))
        return ir.Compute(
            name=f"cs{k}",
            effect=k,
            vertex_tile=rng.integers(0, n, nv),
            vertex_cycles=rng.integers(0, 300, nv),
            vertex_multi=rng.random(nv) < 0.2,
        )
    if choice == 1:
        nt = int(rng.integers(0, 30))
        src = rng.integers(0, n, nt)
        dst = (src // tpi) * tpi + rng.integers(0, tpi, nt)
        return ir.Exchange(
            name=f"ex{k}", src_tile=src, dst_tile=dst, num_bytes=rng.integers(0, 900, nt)
        )
    if choice == 2:
        kind = ["internal", "external", "host"][int(rng.integers(0, 3))]
        return ir.Sync(name=f"sync{k}", sync_kind=kind)
    if choice == 3:
        nt = int(rng.integers(1, 12))
        return ir.StreamCopy(
            name=f"copy{k}",
            effect=k,
            direction="host_to_device",
            tile=rng.integers(0, n, nt),
            num_bytes=rng.integers(0, 5000, nt),
        )
    nt = int(rng.integers(1, 10))
    src = rng.integers(0, n, nt)
    dst = (src + tpi * rng.integers(1, ipus, nt)) % n
    return ir.GlobalExchange(
        name=f"g{k}", src_tile=src, dst_tile=dst, num_bytes=rng.integers(1, 4000, nt)
    )


def random_program(seed: int, cfg, replicas: int = 1) -> ir.Program:
    rng = np.random.default_rng(seed)
    counter = iter(range(10_000))

    def node(depth: int) -> ir.Node:
        r = rng.random()
        if depth < 2 and r < 0.15:
            return ir.Repeat(int(rng.integers(0, 3)), seq(depth + 1))
        if depth < 2 and r < 0.25:
            return ir.If(int(rng.integers(0, 3)), seq(depth + 1), seq(depth + 1))
        if depth < 2 and r < 0.3:
            return ir.Switch(1, [(0, seq(depth + 1)), (2, seq(depth + 1))], seq(depth + 1))
        return random_step(rng, cfg, next(counter), replicas)

    def seq(depth: int) -> ir.Sequence:
        return ir.Sequence([node(depth) for _ in range(int(rng.integers(1, 6)))])

    return ir.Program(entries=(seq(0),), replicas=replicas)


def run_both(cfg, seed: int, replicas: int = 1):
    prog = random_program(seed, cfg, replicas)
    out = []
    for granularity in ("ipu", "tile"):
        c = with_overrides(cfg, {"sim.granularity": granularity})
        dp = AlternatingDataPlane()
        trace = Machine(c).run(prog, data_plane=dp)
        out.append((trace, dp.applied))
    (t_ipu, a_ipu), (t_tile, a_tile) = out
    assert a_ipu == a_tile
    assert len(t_ipu.records) == len(t_tile.records)
    for r1, r2 in zip(t_ipu.records, t_tile.records, strict=True):
        assert (r1.name, r1.first_cycle, r1.last_cycle) == (r2.name, r2.first_cycle, r2.last_cycle)
        np.testing.assert_array_equal(r1.tile_cycles, r2.tile_cycles)
    np.testing.assert_array_equal(t_ipu.tile_end_cycles, t_tile.tile_end_cycles)
    assert t_ipu.totals == t_tile.totals
    # the config hash differs only by sim.granularity, which does not change results
    assert t_ipu.total_cycles == t_tile.total_cycles


TINY2 = load_config("tiny", overrides={"num_ipus": 2})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_tile_granularity_matches_ipu_on_tiny(seed):
    run_both(TINY2, seed)


TINY4 = load_config("tiny", overrides={"num_ipus": 4})


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), replicas=st.sampled_from([1, 2, 4]))
def test_tile_granularity_matches_ipu_on_four_ipus_with_replicas(seed, replicas):
    """Scoped syncs, global exchanges and collectives sharing links, replicated."""
    run_both(TINY4, seed, replicas)


MK1 = load_config("mk1")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_tile_granularity_matches_ipu_on_full_mk1(seed):
    run_both(MK1, seed)


@pytest.mark.parametrize(("seed", "replicas"), [(31, 1), (59, 1), (66, 4)])
def test_programs_whose_host_transfers_end_a_hair_early_in_float_time(seed, replicas):
    """These programs once never ended: a host transfer's timer fired where the float
    clock fell a hair short of its exact end, and the link rescheduled it for ever."""
    run_both(TINY4, seed, replicas)
