"""Replicas in lockstep: a replicated run simulates replica 0's IPUs only where the
replicas cannot differ (``ipusim.machine_replicas.ReplicaSteps._lockstep``).

The trace must be the one of every IPU's group running every step
(``Machine.replica_lockstep = False``): the same fingerprint (every record's cycles and
per-tile arrays, the blocks, the final clocks) and the same decisions. Programs here
mix every kind of step that meets other replicas (syncs of all kinds, stream copies
with prefetch, replicated global exchanges, cross-replica collectives, loops and
blocks), on machines whose links treat the replicas alike (lockstep on) and on ones
where they do not (unequal host links, a copy between replicas, a collective of some
replicas only: lockstep off, and the replicas' clocks do differ there).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from ipusim import ir
from ipusim.config import load_config
from ipusim.dataplane import ScriptedDataPlane
from ipusim.machine import Machine
from ipusim.machine_replicas import ReplicaSteps

ROOT = Path(__file__).resolve().parents[1]
TPI = 8  # tiles per IPU of the tiny preset


def _config(num_ipus: int, **extra):
    return load_config("tiny", overrides={"num_ipus": num_ipus, **extra})


def _seen(monkeypatch) -> list[bool]:
    """Whether each run went in lockstep, as the runs are made."""
    seen: list[bool] = []
    real = ReplicaSteps._lockstep

    def lockstep(self, allowed):
        found = real(self, allowed)
        seen.append(found)
        return found

    monkeypatch.setattr(ReplicaSteps, "_lockstep", lockstep)
    return seen


def _both(cfg, program, answers=None):
    """The traces of ``program`` with lockstep allowed and with every group running."""
    traces = []
    for lockstep in (True, False):
        machine = Machine(cfg)
        machine.replica_lockstep = lockstep
        traces.append(machine.run(program, data_plane=ScriptedDataPlane(answers)))
    return traces


def _assert_same(a, b):
    assert a.fingerprint() == b.fingerprint()
    assert a.decisions == b.decisions
    for ra, rb in zip(a.records, b.records, strict=True):
        assert (ra.name, ra.first_cycle, ra.last_cycle) == (rb.name, rb.first_cycle, rb.last_cycle)
        assert repr(ra.details) == repr(rb.details)
    np.testing.assert_array_equal(a.tile_end_cycles, b.tile_end_cycles)


def _alike(per_tile: np.ndarray, replicas: int) -> bool:
    per_replica = np.asarray(per_tile).reshape(replicas, -1)
    return bool((per_replica == per_replica[0]).all())


def _copy(name, tiles, nbytes, **kw):
    return ir.StreamCopy(name=name, direction="host_to_device", tile=tiles, num_bytes=nbytes, **kw)


def _mixed(replica_ipus: int, num_ipus: int, seed: int, tpi: int = TPI) -> list:
    """Steps of every kind on replica 0's ``replica_ipus`` IPUs (random cycles and
    bytes), a cross-replica all-reduce over ``num_ipus`` IPUs."""
    rng = np.random.default_rng(seed)
    tiles = np.arange(replica_ipus * tpi)
    last = replica_ipus * tpi - 1
    steps = [
        ir.Compute(name="cs", vertex_tile=tiles, vertex_cycles=rng.integers(5, 900, tiles.size)),
        ir.Sync(name="internal", sync_kind="internal"),
        _copy("in", [1, 2, last], rng.integers(40, 4000, 3), stream="in", prefetch=True),
        ir.Exchange(name="ex", src_tile=[0, 5], dst_tile=[3, 1], num_bytes=[64, 96]),
        ir.Sync(name="external", sync_kind="external"),
        ir.Compute(name="cs2", vertex_tile=[4, last], vertex_cycles=rng.integers(5, 300, 2)),
        ir.Sync(name="io", sync_kind="host", tiles=[1, 2]),
        ir.Sync(name="ext-ipus", sync_kind="external", ipus=(0,)),
        ir.Collective(
            name="allreduce",
            op="all_reduce",
            groups=(tuple(range(0, num_ipus, replica_ipus)),),
            num_bytes=(int(rng.integers(1000, 20000)),),
        ),
        _copy("out", [0, last], rng.integers(40, 4000, 2)),
        ir.Sync(name="host", sync_kind="host"),
    ]
    if replica_ipus > 1:  # between replica 0's first and last IPU, in every replica
        steps.insert(
            5, ir.GlobalExchange(name="gx", src_tile=[0], dst_tile=[last], num_bytes=[512])
        )
    return steps


def _program(steps: list, replicas: int, loop: int = 3) -> ir.Program:
    body = ir.Block(steps, "step")
    return ir.Program(entries=(ir.Repeat(loop, body),), replicas=replicas)


@pytest.mark.parametrize(
    ("num_ipus", "replicas", "per_link"),
    [(4, 4, None), (4, 4, 2), (4, 4, 1), (4, 2, 2), (8, 4, 4), (8, 4, 1)],
)
def test_lockstep_gives_the_trace_of_every_group(monkeypatch, num_ipus, replicas, per_link):
    cfg = _config(num_ipus, **({"host.ipus_per_link": per_link} if per_link else {}))
    program = _program(_mixed(num_ipus // replicas, num_ipus, seed=num_ipus + replicas), replicas)
    seen = _seen(monkeypatch)
    fast, full = _both(cfg, program)
    assert seen == [True, False]
    _assert_same(fast, full)
    assert all(_alike(r.tile_cycles, replicas) for r in fast.records)


@pytest.mark.parametrize(
    ("why", "per_link", "change"),
    [
        ("host links of 3 IPUs: the fourth IPU's copies finish apart", 3, None),
        ("a global exchange between replicas", None, "between"),
        ("a collective of two replicas of four", None, "pair"),
    ],
)
def test_replicas_that_can_differ_run_every_group(monkeypatch, why, per_link, change):
    cfg = _config(4, **({"host.ipus_per_link": per_link} if per_link else {}))
    steps = _mixed(1, 4, seed=7)
    if change == "between":  # replica 0's IPU to replica 2's, machine-wide ids
        steps.insert(
            4,
            ir.GlobalExchange(
                name="between", src_tile=[0], dst_tile=[2 * TPI + 3], num_bytes=[4096],
                replicated=False,
            ),
        )  # fmt: skip
    if change == "pair":
        steps.insert(
            4, ir.Collective(name="pair", op="all_reduce", groups=((0, 1),), num_bytes=(8192,))
        )
    seen = _seen(monkeypatch)
    fast, full = _both(cfg, _program(steps, 4))
    assert seen == [False, False], why
    _assert_same(fast, full)
    apart = [r.name for r in fast.records if not _alike(r.tile_cycles, 4)]
    assert apart, why  # some step's cycles did differ between the replicas


def test_data_dependent_control_flow_is_one_walk_for_every_replica(monkeypatch):
    """A loop whose end and a branch whose arm the data decide (predicates answered
    per run: the replicas' values are combined into one answer, so every replica
    walks the same steps): lockstep, and the trace of every group."""
    steps = _mixed(1, 4, seed=3)
    body = ir.Sequence(
        [
            *steps[:4],
            ir.If(predicate=1, then=ir.Sequence(steps[4:7]), else_=ir.Sequence(steps[7:9])),
            *steps[9:],
        ]
    )
    loop = ir.RepeatWhile(condition=ir.Sequence([]), predicate=0, body=body)
    program = ir.Program(entries=(loop,), replicas=4)
    answers = {0: [1, 1, 1, 0], 1: [1, 0, 1]}
    seen = _seen(monkeypatch)
    fast, full = _both(_config(4), program, answers)
    assert seen == [True, False]
    _assert_same(fast, full)
    assert len(fast.decisions) == 7


def test_lockstep_is_off_with_max_cycles_or_tile_groups(monkeypatch):
    program = _program(_mixed(1, 4, seed=5), 4)
    seen = _seen(monkeypatch)
    Machine(_config(4)).run(program, max_cycles=10**9)
    Machine(_config(4, **{"sim.granularity": "tile"})).run(program)
    Machine(_config(4)).run(program)
    assert seen == [False, False, True]


def test_the_mlp_step_in_lockstep(monkeypatch):
    """The data-parallel MLP (4 replicas, effects applied): the engine's runs went in
    lockstep and their traces are those of every group running the same program."""
    sys.path.insert(0, str(ROOT / "examples" / "multi_ipu"))
    import data_parallel_mlp as dp
    import mnist

    seen = _seen(monkeypatch)
    images, labels = mnist.load_digits_as_mnist()
    quiet = {"out": lambda line: None, "hidden": 16}
    engine = dp.run(
        dp.create_device(4, 16), images, labels, replicas=4, batch=4, steps=2, **quiet
    ).engine
    assert seen and all(seen)
    trace = engine.getTrace()
    machine = Machine(engine._machine.config)
    machine.replica_lockstep = False
    full = machine.run(engine.ir_program, data_plane=ScriptedDataPlane.from_trace(trace))
    _assert_same(trace, full)


def test_steps_of_equal_costs_share_their_replicated_arrays():
    """In lockstep, the per-tile arrays of local steps whose replica 0's costs are equal
    are one read-only array (made once for every replica); each is replica 0's values
    repeated, and the trace is that of every group running every step."""
    cfg = _config(8, **{"tile.tiles_per_ipu": 64})  # 256 tiles a replica: arrays shared
    tiles = np.arange(256)
    cycles = np.random.default_rng(5).integers(5, 900, tiles.size)
    steps = [
        ir.Compute(name="a", vertex_tile=tiles, vertex_cycles=cycles),
        ir.Sync(name="internal", sync_kind="internal"),
        ir.Compute(name="b", vertex_tile=tiles, vertex_cycles=cycles.copy()),  # as "a"
        ir.Sync(name="internal2", sync_kind="internal"),
        ir.Compute(name="c", vertex_tile=tiles, vertex_cycles=cycles[::-1].copy()),
        ir.Sync(name="external", sync_kind="external"),
    ]
    fast, full = _both(cfg, _program(steps, replicas=2, loop=2))
    _assert_same(fast, full)
    by_name = {r.name: r.tile_cycles for r in fast.records}
    assert by_name["a"] is by_name["b"] and by_name["a"] is not by_name["c"]
    for name in "abc":
        per_tile = by_name[name]
        assert not per_tile.flags.writeable
        np.testing.assert_array_equal(per_tile, np.tile(per_tile[:256], 2))


def test_a_transfer_of_copies_ends_as_the_copies_would():
    """``HostLink.transfer(copies=k)`` against k equal transfers started together,
    among other transfers (one starting later, one in the background): every end and
    the link's work are the same."""
    import simpy

    from ipusim.host.link import HostLink

    cfg = _config(4)

    def run(copies: int) -> tuple[list[float], int]:
        env = simpy.Environment()
        link = HostLink(env, cfg)
        ends: list[float] = []

        def one(start, nbytes, **kw):
            yield env.timeout(start)
            yield from link.transfer(nbytes, **kw)
            ends.append((nbytes, env.now))

        if copies == 1:
            for _ in range(3):
                env.process(one(0, 3001))
        else:
            env.process(one(0, 3001, copies=3))
        env.process(one(40, 517))
        env.process(one(0, 2000, background=True))
        env.run()
        return sorted(set(ends)), link.busy_cycles

    assert run(3) == run(1)
    assert len(run(1)[0]) == 3  # three different ends: the transfers did share the link


@pytest.mark.parametrize(("num_ipus", "per_link"), [(4, None), (4, 2), (8, 1)])
def test_kept_rings_give_the_trace_of_the_fabric(monkeypatch, num_ipus, per_link):
    """A collective whose rings run alone on an idle fabric (lockstep, one IPU a
    replica, every group in it) keeps its end for later runs of the machine, which take
    it instead of running the rings: their traces stay those of every group running the
    rings on the fabric in every run, and the rings ran in the first run only."""
    import ipusim.machine_links as links

    cfg = _config(num_ipus, **({"host.ipus_per_link": per_link} if per_link else {}))
    program = _program(_mixed(1, num_ipus, seed=11 + num_ipus), num_ipus)
    rings: list[int] = []
    real = links.run_ring

    def counted(*args):
        rings.append(1)
        return real(*args)

    monkeypatch.setattr(links, "run_ring", counted)
    full_machine = Machine(cfg)
    full_machine.replica_lockstep = False
    full = full_machine.run(program)
    fast_machine = Machine(cfg)
    per_run = []
    for _ in range(3):
        rings.clear()
        _assert_same(fast_machine.run(program), full)
        per_run.append(len(rings))
    assert per_run == [3, 0, 0]  # the loop's three all-reduces ran once, then were kept


def test_final_arrays_of_replicas_that_differed_are_compared_whole(monkeypatch):
    """A record filled in as it runs is compared with the last final array of its step
    (kept by the machine from run to run). In lockstep only replica 0's part is filled
    in, so only that part is compared, against a final array made in lockstep. Here the
    same steps first run in a program whose replicas differ (a global exchange from
    replica 0 to replica 2 after the first compute set: every group runs, and the
    external sync's cycles differ between the replicas while replica 0's are those of
    the second program), then in one that goes in lockstep: its trace is that of a
    fresh machine running every group, so the arrays of the first program were not
    taken for the second."""
    steps = _mixed(1, 4, seed=7)
    between = ir.GlobalExchange(
        name="between", src_tile=[0], dst_tile=[2 * TPI + 3], num_bytes=[4096], replicated=False
    )
    apart, alike = _program([steps[0], between, *steps[1:]], 4), _program(steps, 4)
    seen = _seen(monkeypatch)
    machine = Machine(_config(4))
    first = machine.run(apart)
    assert [r.name for r in first.records if not _alike(r.tile_cycles, 4)]
    fast = machine.run(alike)
    full_machine = Machine(_config(4))
    full_machine.replica_lockstep = False
    _assert_same(fast, full_machine.run(alike))
    assert seen == [False, True, False]


def test_end_clocks_shared_by_lockstep_runs_that_end_alike(monkeypatch):
    """A lockstep run's trace shares the end clocks of the machine's last lockstep trace
    (read-only) when replica 0's part is the same, and makes its own otherwise; every
    trace's end clocks are those of every group running."""
    seen = _seen(monkeypatch)
    cfg = _config(4)
    first = _program(_mixed(1, 4, seed=3), 4)
    other = _program(_mixed(1, 4, seed=5), 4)
    halves = _program(_mixed(2, 4, seed=3), 2)
    machine = Machine(cfg)
    programs = (first, first, other, other, first, halves, halves)
    runs = [machine.run(p) for p in programs]
    assert seen == [True] * len(runs)
    for trace, program in zip(runs, programs, strict=True):
        full = Machine(cfg)
        full.replica_lockstep = False
        np.testing.assert_array_equal(trace.tile_end_cycles, full.run(program).tile_end_cycles)
        assert not trace.tile_end_cycles.flags.writeable
    ends = [t.tile_end_cycles for t in runs]
    assert ends[1] is ends[0] and ends[3] is ends[2] and ends[6] is ends[5]
    assert len({id(ends[k]) for k in (0, 2, 4, 5)}) == 4
    assert not np.array_equal(ends[0], ends[2])


def test_end_clocks_of_other_replicas_not_shared(monkeypatch):
    """End clocks kept from a run of two IPUs a replica are not shared by a run of one
    IPU a replica whose replica 0 ends as their first IPU does (their second IPU's
    differ)."""
    seen = _seen(monkeypatch)
    cfg = _config(4)
    cycles = np.arange(5, 5 + 2 * TPI) * 7
    two = ir.Program(
        entries=(ir.Compute(name="cs", vertex_tile=np.arange(2 * TPI), vertex_cycles=cycles),),
        replicas=2,
    )
    one = ir.Program(
        entries=(ir.Compute(name="cs", vertex_tile=np.arange(TPI), vertex_cycles=cycles[:TPI]),),
        replicas=4,
    )
    machine = Machine(cfg)
    kept = machine.run(two).tile_end_cycles
    got = machine.run(one).tile_end_cycles
    assert seen == [True, True]
    np.testing.assert_array_equal(got[:TPI], kept[:TPI])
    full = Machine(cfg)
    full.replica_lockstep = False
    np.testing.assert_array_equal(got, full.run(one).tile_end_cycles)


def test_equal_sync_delays_found_once_per_machine_and_replicas(monkeypatch):
    """Whether every replica's copy of a tile has one sync delay is kept by the machine
    with the stock controller's delays and the replicas: a later run takes the kept
    answer (planted here as False: no lockstep), another replica count finds its own."""
    seen = _seen(monkeypatch)
    cfg = _config(4)
    machine = Machine(cfg)
    four, two = _program(_mixed(1, 4, seed=3), 4), _program(_mixed(2, 4, seed=3), 2)
    first = machine.run(four)
    delays, replicas, equal = machine._equal_delays
    assert delays is machine.timing.sync.delays() and (replicas, equal) == (4, True)
    machine._equal_delays = (delays, 4, False)
    again = machine.run(four)
    machine.run(two)
    assert seen == [True, False, True]
    assert machine._equal_delays[1:] == (2, True)
    _assert_same(first, again)  # every group running gives the same trace


def _equal(a: object, b: object) -> bool:
    """Equal values, arrays and dataclasses of them compared element by element."""
    import dataclasses

    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(b, np.ndarray) and np.array_equal(a, b)
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(
            _equal(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(_equal, a, b))
    return a == b


def test_lockstep_records_make_every_replicas_arrays_when_read():
    """A lockstep run's records hold replica 0's part of their per-tile arrays
    (:class:`~ipusim.trace.ReplicaRecord`) and make every replica's when read: before
    any read none is made; read, each equals the record of every group running (cycles
    and active cycles), is read-only, is one array for records of one part, and a
    pickled record is a plain record of the same arrays."""
    import dataclasses
    import pickle

    from ipusim.trace import _ACTIVE_CYCLES, _TILE_CYCLES, ReplicaRecord, StepRecord

    # 128 tiles an IPU: replica 0's parts (256 tiles) are large enough to be looked up
    # among equal costs' arrays (ipusim.timing.SharedArrays.MIN_SIZE); 8-tile parts are not
    for num_ipus, replicas, seed, tpi in ((4, 4, 3, TPI), (8, 4, 11, TPI), (8, 2, 5, TPI),
                                          (4, 2, 7, 128)):  # fmt: skip
        program = _program(_mixed(num_ipus // replicas, num_ipus, seed=seed, tpi=tpi), replicas)
        fast, full = _both(_config(num_ipus, **{"tile.tiles_per_ipu": tpi}), program)
        rt = num_ipus // replicas * tpi
        assert all(type(r) is ReplicaRecord for r in fast.records)
        for r in fast.records:
            assert _TILE_CYCLES.__get__(r) is None and _ACTIVE_CYCLES.__get__(r) is None
            assert r.tile_part.size == rt and not r.tile_part.flags.writeable
        _assert_same(fast, full)  # (reads every array)
        parts: dict[int, np.ndarray] = {}
        for ra, rb in zip(fast.records, full.records, strict=True):
            for f in dataclasses.fields(StepRecord):  # every field carried over
                if f.name not in ("tile_cycles", "active_cycles"):  # (compared below)
                    assert _equal(getattr(ra, f.name), getattr(rb, f.name)), f.name
            np.testing.assert_array_equal(ra.tile_cycles, rb.tile_cycles)
            assert ra.tile_cycles.size == num_ipus * tpi and not ra.tile_cycles.flags.writeable
            assert ra.tile_cycles is parts.setdefault(id(ra.tile_part), ra.tile_cycles)
            if rb.active_cycles is None:
                assert ra.active_cycles is None
            else:
                np.testing.assert_array_equal(ra.active_cycles, rb.active_cycles)
            back = pickle.loads(pickle.dumps(ra))
            assert type(back) is StepRecord and back.name == ra.name
            np.testing.assert_array_equal(back.tile_cycles, rb.tile_cycles)
        cut = fast.records[0]
        cut.tile_cycles = np.zeros(num_ipus * tpi, np.int64)  # set: the whole array
        assert cut.tile_part is None and not cut.tile_cycles.any()


def _bounded_as_keeping_all(monkeypatch, programs, lockstep, name, bound, held) -> None:
    """Runs ``programs`` twice on a machine whose ``machine_replicas.<name>`` is
    ``bound``: each run's trace is that of a machine keeping all its arrays, and
    ``held`` of the machine's kept arrays (:class:`~ipusim.machine_replicas.KeptArrays`)
    is within ``1..bound`` after each run, where the machine keeping all holds more."""
    import ipusim.machine_replicas as mr

    cfg = _config(4, **{"tile.tiles_per_ipu": 128})

    def machine() -> Machine:
        m = Machine(cfg)
        m.replica_lockstep = lockstep
        return m

    keeping_all, bounded = machine(), machine()
    expected = [keeping_all.run(p, data_plane=ScriptedDataPlane(None)) for p in programs]
    for trace in expected:
        trace.fingerprint()  # (every replica's arrays made)
    assert held(keeping_all._replicated_values) > bound
    monkeypatch.setattr(mr, name, bound)
    for program, want in zip(programs * 2, expected * 2, strict=True):
        got = bounded.run(program, data_plane=ScriptedDataPlane(None))
        _assert_same(got, want)
        for ra, rb in zip(got.records, want.records, strict=True):
            np.testing.assert_array_equal(ra.tile_cycles, rb.tile_cycles)
        assert 0 < held(bounded._replicated_values) <= bound


@pytest.mark.parametrize("lockstep", [True, False])
def test_every_replicas_arrays_kept_by_a_machine_are_bounded_in_bytes(monkeypatch, lockstep):
    """A machine keeps every replica's arrays from run to run up to KEPT_BYTES, then
    lets them go: each run's trace is that of a machine keeping them all, and the bytes
    kept never pass the bound (they would: the machine keeping all holds more)."""
    programs = [_program(_mixed(1, 4, seed=seed, tpi=128), 4) for seed in range(4)]
    bound = 3 * 4 * 128 * 8  # three arrays over the machine's 512 tiles
    _bounded_as_keeping_all(monkeypatch, programs, lockstep, "KEPT_BYTES", bound,
                            lambda kept: kept.nbytes)  # fmt: skip


def test_replica_parts_kept_by_a_machine_are_bounded_in_count(monkeypatch):
    """In lockstep a machine keeps replica 0's parts (one array per contents, 256 tiles:
    looked up) from run to run up to KEPT_STEPS, then lets them go: each run's trace is
    that of a machine keeping them all, and the parts kept never pass the bound."""
    programs = [_program(_mixed(2, 4, seed=seed, tpi=128), 2) for seed in range(4)]
    _bounded_as_keeping_all(monkeypatch, programs, True, "KEPT_STEPS", 2,
                            lambda kept: len(kept.parts))  # fmt: skip
