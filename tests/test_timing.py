"""The timing model: one seam, components chosen by config, every config leaf read."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import numpy as np
import pytest

from ipusim import ir, timing
from ipusim.config import load_config
from ipusim.config_sections import leaf_paths
from ipusim.errors import ConfigError
from ipusim.exchange.internal import phase_cycles
from ipusim.machine import Machine
from ipusim.timing import COMPONENTS, StaticExchange, TimingModel, register_component

ROOT = Path(__file__).resolve().parents[1]


def _exchange(tile, sent, received, msent=None, mrecv=None):
    n = len(tile)
    return ir.Exchange(
        name="ex",
        tile=tile,
        bytes_sent=sent,
        bytes_received=received,
        messages_sent=msent if msent is not None else [0] * n,
        messages_received=mrecv if mrecv is not None else [0] * n,
        max_distance=[0] * n,
    )


def test_every_step_kind_has_a_tag_phase_and_component():
    classes = (ir.Compute, ir.Exchange, ir.Sync, ir.StreamCopy, ir.RemoteBufferCopy,
               ir.GlobalExchange, ir.Collective)  # fmt: skip
    kinds = {cls.kind for cls in classes}
    assert kinds == set(ir.STEP_KINDS)
    for kind in ir.STEP_KINDS.values():
        assert kind.phase in ir.PHASES
        assert kind.component is None or kind.component in COMPONENTS


def test_a_swapped_exchange_component_changes_only_the_exchange():
    class Doubled(StaticExchange):
        def cost(self, step):
            cost = super().cost(step)
            return dataclasses.replace(cost, cycles=2 * cost.cycles)

    register_component("exchange", "doubled_for_test", Doubled)
    base = load_config("tiny")
    swapped = load_config("tiny", overrides={"exchange.model": "doubled_for_test"})
    ex = _exchange([0, 1], [400, 0], [0, 400])
    cs = ir.Compute(name="cs", vertex_tile=[0, 1, 1], vertex_cycles=[10, 20, 30])
    program = ir.Sequence([cs, ir.Sync(name="s"), ex])
    plain, doubled = Machine(base).run(program), Machine(swapped).run(program)
    assert doubled.totals["internal_exchange"] == 2 * plain.totals["internal_exchange"]
    assert doubled.totals["compute"] == plain.totals["compute"]
    # the graph-profile path asks the same object
    assert np.array_equal(
        TimingModel(swapped).tile_cycles(ex), 2 * TimingModel(base).tile_cycles(ex)
    )


def test_a_component_object_can_be_passed_directly():
    class Flat:
        def cost(self, step):
            return dataclasses.replace(StaticExchange(cfg).cost(step), cycles=np.full(8, 7))

    cfg = load_config("tiny")
    timing = TimingModel(cfg, exchange=Flat())
    trace = Machine(cfg, timing=timing).run(_exchange([0], [8], [0]))
    assert trace.totals["internal_exchange"] == 8 * 7


def test_an_unknown_component_name_is_a_config_error():
    cfg = load_config("tiny", overrides={"sync.model": "controler"})
    with pytest.raises(ConfigError, match=r"sync.model: found 'controler'.*controller"):
        TimingModel(cfg)
    with pytest.raises(ConfigError, match="unknown component"):
        TimingModel(load_config("tiny"), exchanges=object())


def test_message_setup_cycles_add_per_message_sent_and_received():
    cfg = load_config(
        "tiny",
        overrides={"exchange.cycles_per_message": 2.5, "exchange.fixed_latency_cycles": 3},
    )
    ex = _exchange([0, 1], [40, 8], [0, 12], msent=[3, 1], mrecv=[0, 2])
    cycles = TimingModel(cfg).tile_cycles(ex)
    bpc = cfg.exchange.bytes_per_cycle
    assert cycles[0] == math.ceil(40 / bpc) + 3 + math.ceil(2.5 * 3)
    assert cycles[1] == math.ceil(12 / bpc) + 3 + math.ceil(2.5 * 3)
    assert cycles[2:].sum() == 0


def test_phase_exchange_keeps_every_tile_of_the_ipu_until_the_slowest():
    cfg = load_config("tiny", overrides={"exchange.model": "phase", "num_ipus": 2})
    ex = _exchange([0, 1, 9], [64, 0, 0], [0, 64, 16])
    cycles = TimingModel(cfg).tile_cycles(ex)
    bpc = cfg.exchange.bytes_per_cycle
    assert cycles[:8].tolist() == [math.ceil(64 / bpc)] * 8
    assert cycles[8:].tolist() == [math.ceil(16 / bpc)] * 8


def test_phase_cycles_are_each_ipus_slowest_tile():
    rng = np.random.default_rng(5)
    for ipus, tpi in [(1, 1), (1, 7), (3, 4), (4, 1216)]:
        cycles = rng.integers(0, 10_000, ipus * tpi).astype(np.int64)
        cycles[rng.random(cycles.size) < 0.3] = 0
        slowest = [int(cycles[i * tpi : (i + 1) * tpi].max()) for i in range(ipus)]
        got = phase_cycles(cycles, tpi)
        assert got.dtype == np.int64
        assert got.tolist() == [m for m in slowest for _ in range(tpi)]


def test_a_stream_copy_with_its_own_exchange_has_no_tile_floor():
    cfg = load_config("tiny", overrides={"host.latency_s": 0})
    args = dict(name="c", direction="host_to_device", tile=[0], num_bytes=[4000])
    timing = TimingModel(cfg)
    alone = timing.stream_copy_cycles(ir.StreamCopy(**args))[0]
    split = timing.stream_copy_cycles(ir.StreamCopy(**args, exchanged=True))[0]
    link = math.ceil(round(4000 / cfg.host_bytes_per_cycle, 9))
    assert split == link
    assert alone == max(link, math.ceil(4000 / cfg.exchange.bytes_per_cycle))


#: Config leaves that label a machine or steer the simulation but set no number.
_NOT_TIMING = {"name", "description", "provenance"}


@pytest.mark.parametrize("path", leaf_paths())
def test_every_config_leaf_is_read_by_the_code(path):
    leaf = path.rsplit(".", 1)[-1]
    if leaf in _NOT_TIMING:
        pytest.skip("label, not a machine value")
    pattern = re.compile(rf"\.{leaf}\b")
    sources = [p for d in ("ipusim", "poplar_api") for p in (ROOT / d).rglob("*.py")]
    # attribute reads only: the declarations in config.py are ``leaf: type = Field(...)``;
    # config.py's derived quantities (host_latency_cycles, ...) count as reads
    readers = [p for p in sources if pattern.search(p.read_text())]
    if leaf == "model":  # read generically: getattr(cfg, section).model in ipusim.timing
        readers = [p for p in sources if p.name == "timing.py"]
    assert readers, f"config field {path} is never read"


def test_a_timing_model_subclass_gives_the_records_its_tile_cycles():
    class Doubled(TimingModel):
        def tile_cycles(self, step):
            cycles = super().tile_cycles(step)
            return None if cycles is None else 2 * cycles

    cfg = load_config("tiny")
    step = ir.Compute(name="cs", vertex_tile=[0, 3], vertex_cycles=[10, 40])
    plain = Machine(cfg).run(step).records[0].tile_cycles
    doubled = Machine(cfg, timing=Doubled(cfg)).run(step).records[0].tile_cycles
    assert plain.any() and doubled.tolist() == (2 * plain).tolist()


def test_equal_per_tile_costs_are_one_read_only_array():
    """Compute sets and exchanges whose per-tile cycles are equal share one array (the
    values are those each step's component computes alone); different ones do not."""
    cfg = load_config("mk2")
    tm = TimingModel(cfg)
    tiles = np.arange(0, cfg.num_tiles, 3)
    a = ir.Compute(name="a", vertex_tile=tiles, vertex_cycles=np.full(tiles.size, 50))
    b = ir.Compute(name="b", vertex_tile=tiles, vertex_cycles=np.full(tiles.size, 50))
    c = ir.Compute(name="c", vertex_tile=tiles, vertex_cycles=np.full(tiles.size, 51))
    ca, cb, cc = tm.cost(a), tm.cost(b), tm.cost(c)
    assert cb.tile_cycles is ca.tile_cycles and cb.active_cycles is ca.active_cycles
    assert cc.tile_cycles is not ca.tile_cycles
    assert not ca.tile_cycles.flags.writeable
    for step, cost in ((a, ca), (b, cb), (c, cc)):
        alone = tm.compute.cost(step)
        assert np.array_equal(cost.tile_cycles, alone.tile_cycles)
        assert np.array_equal(cost.active_cycles, alone.active_cycles)
        assert np.array_equal(cost.vertex_context, alone.vertex_context)
    n = tiles.size
    x = _exchange(tiles, [8] * n, [8] * n)
    y = _exchange(tiles, [8] * n, [8] * n)
    z = _exchange(tiles, [16] * n, [16] * n)
    cx, cy, cz = tm.cost(x), tm.cost(y), tm.cost(z)
    assert cy.cycles is cx.cycles and cz.cycles is not cx.cycles
    for step, cost in ((x, cx), (y, cy), (z, cz)):
        alone = tm.exchange.cost(step)
        assert np.array_equal(cost.cycles, alone.cycles)
        assert np.array_equal(cost.bytes_received, alone.bytes_received)
    assert tm.cost(a) is ca  # cached per step as before


def test_shared_arrays_share_equal_values_only_and_key_their_order(monkeypatch):
    """Equal per-tile arrays are one; arrays that differ are never taken for one
    another, even when their keys are equal (compared element by element, here with
    every key made the same); reordered values (a rotated cost) get other keys."""
    rng = np.random.default_rng(7)
    base = rng.integers(-(2**40), 2**40, 1216)
    keys = {timing._contents_key(np.roll(base, k)) for k in range(base.size)}
    assert len(keys) == base.size
    assert timing._contents_key(base) != timing._contents_key(base + (np.arange(1216) == 5))
    for key in (timing._contents_key, lambda values: 0):
        monkeypatch.setattr(timing, "_contents_key", key)
        shared = timing.SharedArrays()
        first = shared.get(base.copy())
        assert shared.get(base.copy()) is first and not first.flags.writeable
        for k in range(1216):  # one element changed, anywhere: another array
            other = base.copy()
            other[k] += 1
            got = shared.get(other)
            assert got is other and np.array_equal(got, other) and not got.flags.writeable
        assert shared.get(base.copy()) is first


class _ThreeArgSync:
    """A custom sync component written before ``release`` took the IPUs of an external
    sync: every tile leaves 1,000 cycles after the last arrival, plus its delay."""

    def __init__(self, cfg):
        self._delays = np.arange(cfg.num_tiles, dtype=np.int64) % 3

    def delays(self):
        return self._delays

    def release(self, arrival, delays, kind):
        return int(arrival.max()) + 1000 + delays


def test_a_three_argument_sync_component_still_prices_external_syncs():
    cfg = load_config("tiny", overrides={"num_ipus": 4})
    sync = ir.Sync(name="x", sync_kind=ir.SyncKind.EXTERNAL, ipus=(1, 2))
    cs = ir.Compute(name="cs", vertex_tile=[8, 17], vertex_cycles=[50, 90])
    timing = TimingModel(cfg, sync=_ThreeArgSync(cfg))
    ends = Machine(cfg, timing=timing).run(ir.Sequence([cs, sync])).tile_end_cycles
    before = Machine(cfg).run(cs).tile_end_cycles  # when each tile reaches the sync
    tiles = np.arange(8, 24)  # IPUs 1 and 2, 8 tiles each
    # the component's own rule over the two IPUs' tiles: last arrival + 1000 + delay
    expected = int(before[tiles].max()) + 1000 + tiles % 3
    assert np.asarray(ends)[tiles].tolist() == expected.tolist()
    assert np.asarray(ends)[:8].tolist() == np.asarray(before)[:8].tolist()  # IPU 0 not in it


def test_a_timing_model_with_an_adapted_sync_component_copies_and_pickles():
    """The adapted three-argument component is an attribute of a timing model like any
    other: the model deep-copies and pickles, and the copy prices the sync as before."""
    import copy
    import pickle

    cfg = load_config("tiny", overrides={"num_ipus": 4})
    sync = ir.Sync(name="x", sync_kind=ir.SyncKind.EXTERNAL, ipus=(1, 2))
    cs = ir.Compute(name="cs", vertex_tile=[8, 17], vertex_cycles=[50, 90])
    timing = TimingModel(cfg, sync=_ThreeArgSync(cfg))
    want = Machine(cfg, timing=timing).run(ir.Sequence([cs, sync])).tile_end_cycles
    for other in (copy.deepcopy(timing), pickle.loads(pickle.dumps(timing))):
        got = Machine(cfg, timing=other).run(ir.Sequence([cs, sync])).tile_end_cycles
        assert np.asarray(got).tolist() == np.asarray(want).tolist()
        assert other.sync.inner.delays().tolist() == timing.sync.inner.delays().tolist()


class _ThreeArgSyncWithOptions(_ThreeArgSync):
    """The three-argument rule with keyword options: still no fourth positional."""

    def release(self, arrival, delays, kind, **options):
        return super().release(arrival, delays, kind)


def test_a_three_argument_release_with_keyword_options_is_adapted_too():
    """``**options`` takes no positional argument: the component is adapted like one
    without them, and prices the external sync by its own rule."""
    cfg = load_config("tiny", overrides={"num_ipus": 4})
    sync = ir.Sync(name="x", sync_kind=ir.SyncKind.EXTERNAL, ipus=(1, 2))
    cs = ir.Compute(name="cs", vertex_tile=[8, 17], vertex_cycles=[50, 90])
    timing = TimingModel(cfg, sync=_ThreeArgSyncWithOptions(cfg))
    ends = Machine(cfg, timing=timing).run(ir.Sequence([cs, sync])).tile_end_cycles
    before = Machine(cfg).run(cs).tile_end_cycles
    tiles = np.arange(8, 24)
    assert np.asarray(ends)[tiles].tolist() == (before[tiles].max() + 1000 + tiles % 3).tolist()
