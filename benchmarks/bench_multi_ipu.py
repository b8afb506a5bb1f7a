"""Host speed of multi-IPU simulation: collectives on pods and a replicated MLP step.

Two tables:

* **All-reduce.** One ``Collective`` step (ring all-reduce of ``--megabytes`` MB,
  spread evenly over every tile) on the ``m2000`` (4 IPUs), ``pod16`` and ``pod64``
  presets, each IPU one member of a ring laid along the links, run with
  ``ipusim.machine.Machine``; against one IPU: a single-IPU superstep on ``mk2``
  (compute, sync, exchange of 256 bytes per tile, as ``bench_machine.py``).
* **MLP step.** The data-parallel MLP training step of
  ``examples/multi_ipu/data_parallel_mlp.py`` on ``pod16`` with 16 replicas, against
  the same step with 1 replica on one IPU: wall seconds to build, compile and run,
  simulated cycles and simulated cycles per host second of the run.

Run::

    python benchmarks/bench_multi_ipu.py [--quick] [--megabytes MB]
    python benchmarks/bench_multi_ipu.py --split 16 [--runs 40]   # one table below

``--split R`` runs only the MLP step with ``R`` replicas and gives where a later run's
CPU goes: the effects (each compute set, copy and collective of every replica), the
convolution partials' compiled pass inside them, and the rest of the run
(:func:`effect_split`).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ipusim import ir
from ipusim.config import load_config
from ipusim.exchange.collectives import ring_order
from ipusim.machine import Machine

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples/tutorials"))
sys.path.insert(0, str(ROOT / "examples/cnn"))


def all_reduce_row(preset: str, megabytes: float) -> dict[str, object]:
    """Simulate one all-reduce over every IPU of ``preset``."""
    cfg = load_config(preset)
    machine = Machine(cfg)
    nbytes = int(megabytes * 1e6)
    order = ring_order(machine.timing.topology, list(range(cfg.num_ipus)))
    step = ir.Collective(
        name="all_reduce",
        op="all_reduce",
        groups=[order],
        num_bytes=[nbytes],
        max_tile_bytes=[math.ceil(nbytes / cfg.tile.tiles_per_ipu)],
    )
    start = time.perf_counter()
    trace = machine.run(step)
    seconds = time.perf_counter() - start
    return {
        "what": f"all-reduce {megabytes:g} MB, {preset}",
        "ipus": cfg.num_ipus,
        "cycles": trace.total_cycles,
        "seconds": seconds,
    }


def one_ipu_row() -> dict[str, object]:
    """One superstep of bench_machine.py on one mk2 IPU, repeated 20 times."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_machine import superstep

    cfg = load_config("mk2")
    program = ir.Repeat(20, superstep(cfg))
    start = time.perf_counter()
    trace = Machine(cfg).run(program)
    seconds = time.perf_counter() - start
    return {
        "what": "20 supersteps, mk2",
        "ipus": 1,
        "cycles": trace.total_cycles,
        "seconds": seconds,
    }


def _mlp_engine(replicas: int, preset: str, batch: int, hidden: int) -> dict[str, Any]:
    """The data-parallel MLP step (examples/multi_ipu/data_parallel_mlp.py) with
    ``replicas`` replicas of one IPU each on a ``preset`` device, built, compiled and
    loaded, its parameters written and streams connected; with the wall and CPU times
    of build and compile."""
    sys.path.insert(0, str(ROOT / "examples/multi_ipu"))
    import mnist
    import tut5
    from data_parallel_mlp import build, initial_parameters, replica_batches

    from poplar_api import DeviceManager, Engine, Graph, TargetType

    images, labels = mnist.load_digits_as_mnist()
    inputs = tut5.prepare_inputs(images[: replicas * batch])
    x_buf, y_buf = replica_batches(inputs, labels, replicas, batch, 1)
    device = DeviceManager(preset, replicas).getDevices(TargetType.IPU, replicas)[0]
    device.attach()
    start, start_cpu = time.perf_counter(), time.process_time()
    graph = Graph(device.getTarget(), replication_factor=replicas)
    step = build(graph, batch, 0.1, hidden)
    built, built_cpu = time.perf_counter(), time.process_time()
    engine = Engine(graph, step)
    engine.load(device)
    compiled, compiled_cpu = time.perf_counter(), time.process_time()
    for name, value in initial_parameters(3, hidden).items():
        engine.writeTensor(name, value)
    engine.connectStream("images", x_buf)
    engine.connectStream("labels", y_buf)
    loss = np.zeros((replicas, batch), np.float32)
    engine.connectStream("loss", loss)
    return {
        "engine": engine,
        "device": device,
        "loss": loss,
        "build": built - start,
        "compile": compiled - built,
        "build_cpu": built_cpu - start_cpu,
        "compile_cpu": compiled_cpu - built_cpu,
    }


def mlp_step(
    replicas: int, preset: str, batch: int, hidden: int, later: int = 0
) -> dict[str, object]:
    """One data-parallel MLP step (examples/multi_ipu/data_parallel_mlp.py) with
    ``replicas`` replicas of one IPU each on a ``preset`` device: build, compile and a
    first run timed, then ``later`` more runs of the same step (``later_cpu``: the CPU
    seconds of each; a training loop's steps after the first)."""
    made = _mlp_engine(replicas, preset, batch, hidden)
    engine = made["engine"]
    run_start, run_cpu = time.perf_counter(), time.process_time()
    engine.run(0)
    seconds = time.perf_counter() - run_start
    cpu_seconds = time.process_time() - run_cpu  # (a shared machine's wall time varies)
    later_cpu = []
    for _ in range(later):
        cpu = time.process_time()
        engine.run(0)
        later_cpu.append(time.process_time() - cpu)
    made["device"].detach()
    return {
        "what": f"MLP step, {replicas} replica(s), {preset}",
        "ipus": replicas,
        "cycles": engine.getTrace().total_cycles,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "build": made["build"],
        "compile": made["compile"],
        "build_cpu": made["build_cpu"],
        "compile_cpu": made["compile_cpu"],
        "later_cpu": later_cpu,
    }


def effect_split(
    replicas: int, batch: int = 16, hidden: int = 128, runs: int = 40, warm: int = 3
) -> dict[str, Any]:
    """Where a later run of the MLP step's CPU goes: the step with ``replicas``
    replicas (``pod16`` for more than one, else ``mk2``) run ``warm`` times untimed,
    then ``runs`` times with the process CPU taken around the whole run, around each
    effect the engine applies (a compute set, copy, collective or stream copy of every
    replica, however the engine applies it) and around each call of the convolution
    partials' compiled 8x8 pass (:mod:`poplar_api.poplin.conv_chain`) inside them.
    Per run, in milliseconds: ``run``, ``effects`` (their sum), ``rest`` (the run
    outside the effects: the machine's simulation and the engine around it), ``pass``
    and ``by_effect`` (name of the step that applies it -> CPU, largest first). The
    timers cost a few microseconds per effect. The wrapped effects are put back before
    it returns."""
    from poplar_api.poplin import conv_chain

    made = _mlp_engine(replicas, "pod16" if replicas > 1 else "mk2", batch, hidden)
    engine = made["engine"]
    for _ in range(warm):
        engine.run(0)
    names: dict[int, str] = {}
    for step in ir.iter_steps(engine.ir_program):
        if step.effect is not None:
            names.setdefault(step.effect, step.name)
    effects = engine._lowered.effects  # the engine's table of effects (no public hook)
    kept = list(effects)
    every = engine._lowered.every_replica  # effects that serve every replica in turn
    kept_every = dict(every)
    cpu = np.zeros(len(kept))
    in_pass = [0.0]

    def timed(k: int, fn: Any) -> Any:
        def run() -> None:
            start = time.process_time()
            fn()
            cpu[k] += time.process_time() - start

        return run

    def timed_every(k: int, fn: Any) -> Any:
        def run() -> bool:
            start = time.process_time()
            done = fn()
            cpu[k] += time.process_time() - start
            return done

        return run

    def timed_pass(*args: Any) -> None:
        start = time.process_time()
        pass_run(*args)
        in_pass[0] += time.process_time() - start

    pass_run = conv_chain._run
    effects[:] = [timed(k, fn) for k, fn in enumerate(kept)]
    every.update({k: timed_every(k, fn) for k, fn in kept_every.items()})
    conv_chain._run = timed_pass
    total = 0.0
    try:
        for _ in range(runs):
            start = time.process_time()
            engine.run(0)
            total += time.process_time() - start
    finally:
        effects[:] = kept
        every.update(kept_every)
        conv_chain._run = pass_run
        made["device"].detach()
    per_run = 1e3 / runs
    by_name: dict[str, float] = {}
    for k in np.argsort(-cpu, kind="stable"):
        name = names.get(int(k), f"effect {k}")
        by_name[name] = by_name.get(name, 0.0) + float(cpu[k]) * per_run
    return {
        "replicas": replicas,
        "cycles": engine.getTrace().total_cycles,
        "run": total * per_run,
        "effects": float(cpu.sum()) * per_run,
        "rest": (total - float(cpu.sum())) * per_run,
        "pass": in_pass[0] * per_run,
        "by_effect": by_name,
    }


def print_split(split: dict[str, Any], top: int = 12) -> None:
    """:func:`effect_split`'s figures as a short table."""
    print(
        f"MLP step, {split['replicas']} replica(s), {split['cycles']:,} cycles; CPU per "
        f"later run: {split['run']:.2f} ms, effects {split['effects']:.2f} ms (of which "
        f"the 8x8 pass {split['pass']:.2f} ms), rest {split['rest']:.2f} ms"
    )
    for name, ms in list(split["by_effect"].items())[:top]:
        print(f"  {ms:8.2f} ms  {name}")


def mlp_rows(quick: bool) -> list[dict[str, object]]:
    """The MLP step on 16 replicas of pod16 and on 1 replica of one mk2 IPU."""
    batch, hidden = (4, 16) if quick else (16, 128)
    return [mlp_step(1, "mk2", batch, hidden), mlp_step(16, "pod16", batch, hidden)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    parser.add_argument("--megabytes", type=float, default=100.0, help="all-reduce size")
    parser.add_argument(
        "--split",
        type=int,
        metavar="REPLICAS",
        help="only the MLP step's later runs with REPLICAS replicas: CPU per effect",
    )
    parser.add_argument("--runs", type=int, default=40, help="timed runs for --split")
    args = parser.parse_args(argv)
    if args.split:
        batch, hidden = (4, 16) if args.quick else (16, 128)
        print_split(effect_split(args.split, batch, hidden, args.runs))
        return 0
    megabytes = 1.0 if args.quick else args.megabytes
    rows = [one_ipu_row()]
    rows += [all_reduce_row(p, megabytes) for p in ("m2000", "pod16", "pod64")]
    mlp = mlp_rows(args.quick)
    print(f"{'workload':<34} {'IPUs':>5} {'sim cycles':>14} {'host s':>8} {'cycles/host s':>14}")
    for row in rows + mlp:
        rate = row["cycles"] / row["seconds"] if row["seconds"] else float("inf")
        print(
            f"{row['what']:<34} {row['ipus']:>5} {row['cycles']:>14,} "
            f"{row['seconds']:>8.3f} {rate:>14,.0f}"
        )
    for row in mlp:
        print(f"{row['what']}: build {row['build']:.2f} s, compile {row['compile']:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
