"""Every figure of the performance-at-scale targets, and a scaling sweep.

Rows (each with its target and the ratio it is judged by, measured in the same run):

* distinct supersteps per host second of ``engine.run`` at granularity ``ipu`` and
  ``tile`` (for ``tile`` also SimPy's own rate with a process per tile that only
  meets the others at a barrier each superstep, the ceiling of that granularity): a
  Poplar-like program on mk1 (1,216 tiles) of ``N`` different compute sets (one
  vertex per tile, estimates differing per step) each followed by a copy that
  rotates the data by a different number of tiles (an exchange), so no two supersteps
  are alike and no step cost can be reused. The best of three runs counts, each
  with a new graph, engine and machine (the range is printed). For reference the
  same rate is measured on the machine model alone (``bench_machine.superstep`` with
  a different seed per step, built directly as IR).
* graph build, compile (``Engine(graph, programs)``) and vertex executions in a run,
  per host second, on tutorial 7 10000x1000 on model-ipu2 (``bench_tut7.time_tut7``);
  its end-to-end seconds over numpy's float32 matvec of the same matrix, timed in the
  same process.
* graph build and compile per host second of library-built graphs (``bench_library.py``:
  the CNN training step of ``examples/cnn``, ``bench_conv.py``'s convolutions, the PopART
  CNN of ``examples/popart``), each in its own child process, judged by tutorial 7's
  targets (skipped with ``--skip-library``).
* peak host RAM (max RSS of a child process) of tutorial 7 10000x1000 and of tutorial 4
  ``--oom`` (skipped with ``--skip-big``).
* scaling sweep: tutorial 7's graph with split 9 and 100 columns (10 vertices a row) at
  10 k, 100 k and 1 M vertices, each in its own process: build, compile and run seconds
  and peak RAM, each per vertex (``--skip-big`` drops 1 M).

Run::

    python benchmarks/bench_scale.py [--quick] [--skip-big] [--skip-library] [--steps N]
        [--tile-steps N]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import simpy

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_library import BUILD_TARGET, COMPILE_TARGET, WORKLOADS, measure_in_child
from bench_machine import superstep
from bench_tut7 import load_tut7, time_tut7
from child import child_peak

from ipusim import ir
from ipusim.config import load_config
from ipusim.machine import Machine
from poplar_api import FLOAT, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.codelet import Input, Output, Vector, Vertex

ROOT = Path(__file__).resolve().parent.parent
TUT4 = ROOT / "examples" / "tutorials" / "tut4.py"
TUT7 = ROOT / "examples" / "tutorials" / "tut7.py"
#: Elements each vertex of the distinct-step program reads and writes.
STEP_ELEMENTS = 4
#: Column split and columns of the sweep's tutorial-7 graph (split + 1 vertices a row).
SWEEP_SPLIT = 9
SWEEP_COLS = 100
MB = 1 << 20
#: Runs of each distinct-step program (each with a new graph and engine); the best counts.
DISTINCT_TRIES = 3


class StepVertex(Vertex):
    """``out[i] = in[i] + 1`` (the work of one distinct superstep on one tile)."""

    in_ = Input(Vector(FLOAT))
    out = Output(Vector(FLOAT))

    @staticmethod
    def compute(in_, out):
        for i in range(in_.shape[0]):
            out[i] = in_[i] + np.float32(1.0)
        return True


def distinct_step_program(graph: Graph, steps: int) -> prog.Sequence:
    """``steps`` supersteps, no two alike: compute set ``k`` then a copy rotating by ``k+1``.

    Row ``t`` of ``x[k]`` (and the vertex reading it, and row ``t`` of ``y[k]``) lives on
    tile ``(t * (k + 1)) % T`` rotated by ``k``; ``y[k]`` is copied into ``x[k+1]``, whose
    rows live elsewhere, so each copy is an exchange with its own pattern. Vertex
    estimates depend on the step and the tile.
    """
    graph.addCodelets([StepVertex])
    tiles = graph.getTarget().getNumTiles()
    rows = np.arange(tiles)
    body: list[prog.Program] = []
    x = graph.addVariable(FLOAT, [tiles, STEP_ELEMENTS], "x0")
    for t in rows:
        graph.setTileMapping(x[int(t)], int(t))
    place = rows
    for k in range(steps):
        y = graph.addVariable(FLOAT, [tiles, STEP_ELEMENTS], f"y{k}")
        cs = graph.addComputeSet(f"step{k}")
        for t in rows:
            tile = int(place[t])
            graph.setTileMapping(y[int(t)], tile)
            v = graph.addVertex(cs, "StepVertex", {"in": x[int(t)], "out": y[int(t)]})
            graph.setTileMapping(v, tile)
            graph.setPerfEstimate(v, 20 + (7 * k + 13 * int(t)) % 97)
        body.append(prog.Execute(cs))
        place = (rows + k + 1) % tiles
        x = graph.addVariable(FLOAT, [tiles, STEP_ELEMENTS], f"x{k + 1}")
        for t in rows:
            graph.setTileMapping(x[int(t)], int(place[t]))
        body.append(prog.Copy(y, x))
    return prog.Sequence(body)


@dataclass(frozen=True)
class StepRate:
    """Distinct supersteps run and the host seconds of ``engine.run``."""

    granularity: str
    steps: int
    vertices: int
    build_s: float
    compile_s: float
    run_s: float

    @property
    def rate(self) -> float:
        """Supersteps per host second of the run."""
        return self.steps / self.run_s


def time_distinct_steps(granularity: str, steps: int) -> StepRate:
    """Build, compile and run the distinct-step program on mk1 at ``granularity``."""
    device = IPUModel(load_config("mk1", overrides={"sim.granularity": granularity})).createDevice()
    graph = Graph(device.getTarget())
    t0 = time.perf_counter()
    program = distinct_step_program(graph, steps)
    t1 = time.perf_counter()
    engine = Engine(graph, program)
    t2 = time.perf_counter()
    engine.load(device)
    t3 = time.perf_counter()
    engine.run(0)
    t4 = time.perf_counter()
    trace = engine.getTrace()
    computes = sum(1 for r in trace.records if r.kind == "compute") if trace else 0
    if computes != steps:
        raise RuntimeError(f"expected {steps} compute steps in the trace, got {computes}")
    return StepRate(granularity, steps, graph.getNumVertices(), t1 - t0, t2 - t1, t4 - t3)


def machine_distinct_rate(granularity: str, steps: int) -> float:
    """Supersteps per host second of the machine model alone (IR, a new seed per step)."""
    cfg = load_config("mk1", overrides={"sim.granularity": granularity})
    program = ir.Sequence(tuple(superstep(cfg, seed=k) for k in range(steps)), name="distinct")
    machine = Machine(cfg)
    t0 = time.perf_counter()
    machine.run(program)
    return steps / (time.perf_counter() - t0)


def simpy_floor_rate(tiles: int, steps: int) -> float:
    """Supersteps per host second of SimPy alone with one process per tile, each
    arriving once a superstep at a barrier (one shared event, triggered by the last
    to arrive) and doing nothing else: the ceiling of granularity ``tile``, where
    every tile is a process that meets the others at each sync."""
    env = simpy.Environment()
    barrier = {"event": env.event(), "arrived": 0}

    def tile() -> Generator[simpy.Event, None, None]:
        for _ in range(steps):
            barrier["arrived"] += 1
            if barrier["arrived"] < tiles:
                yield barrier["event"]
            else:  # the last to arrive lets the others go on
                event = barrier["event"]
                barrier["event"], barrier["arrived"] = env.event(), 0
                event.succeed()

    for _ in range(tiles):
        env.process(tile())
    t0 = time.perf_counter()
    env.run()
    return steps / (time.perf_counter() - t0)


def build_seconds_without_gc(rows: int, cols: int) -> float:
    """Seconds of tutorial 7's ``build`` with Python's cyclic garbage collector paused
    (a diagnostic: the difference to the normal build is the collector's share)."""
    tut7 = load_tut7()
    target = tut7.create_device("model-ipu2").getTarget()
    best, _ = tut7.choose_split_for(target, rows, cols)
    graph = Graph(target)
    gc.collect()
    gc.disable()
    try:
        t0 = time.perf_counter()
        tut7.build(graph, rows, cols, best.split)
        return time.perf_counter() - t0
    finally:
        gc.enable()


def numpy_matvec_seconds(rows: int, cols: int, repeats: int = 20) -> float:
    """Best-of-``repeats`` seconds of numpy's float32 matrix @ vector at this size."""
    tut7 = load_tut7()
    matrix, vector = tut7.host_data(rows, cols)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        matrix @ vector
        best = min(best, time.perf_counter() - t0)
    return best


def sweep_point(rows: int) -> dict[str, float]:
    """Build, compile and run tutorial 7's graph for ``rows`` rows (in this process)."""
    t = time_tut7(load_tut7(), "model-ipu2", rows, SWEEP_COLS, split=SWEEP_SPLIT)
    return {
        "vertices": t.vertices,
        "build_s": t.build_s,
        "compile_s": t.compile_s,
        "run_s": t.run_s,
        "ok": t.ok,
    }


def library_figures() -> list[Figure]:
    """Build and compile rates of each library-built graph of ``bench_library.py``
    (each in its own child process), judged by tutorial 7's targets."""
    figures = []
    for workload in WORKLOADS:
        log(f"library-built graph: {workload} (child process)")
        r = measure_in_child(workload)
        size = f"{workload}, {r.vertices:,} vertices"
        figures += [
            Figure(
                f"graph build, vertices/s ({size})",
                fmt_rate(r.build_rate),
                f"≥{BUILD_TARGET // 1000} k",
                f"{r.build_rate / BUILD_TARGET:.3f} of target ({r.build_s:.2f} s)",
            ),
            Figure(
                f"compile (lowering), vertices/s ({size})",
                fmt_rate(r.compile_rate),
                f"≥{COMPILE_TARGET // 1000} k",
                f"{r.compile_rate / COMPILE_TARGET:.3f} of target ({r.compile_s:.2f} s; "
                f"first build + compile in the process {r.cold_s:.2f} s)",
            ),
        ]
    return figures


@dataclass(frozen=True)
class Figure:
    """One row of the targets table: measured value, target and how it is judged."""

    name: str
    value: str
    target: str
    judged: str


def fmt_rate(x: float) -> str:
    """A rate with thousands separators (k / M suffix when large)."""
    if x >= 1e6:
        return f"{x / 1e6:.2f} M"
    if x >= 1e4:
        return f"{x / 1e3:.1f} k"
    return f"{x:,.0f}"


def table(figures: Sequence[Figure]) -> str:
    """The figures as a markdown table."""
    lines = [
        "| figure | measured | target | judged by (measured in this run) |",
        "|---|---:|---:|---|",
    ]
    lines += [f"| {f.name} | {f.value} | {f.target} | {f.judged} |" for f in figures]
    return "\n".join(lines)


def log(text: str) -> None:
    """Progress to stderr."""
    print(text, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Measure every row of the targets table and the sweep; print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--skip-big", action="store_true", help="skip tut4 --oom and 1 M vertices")
    parser.add_argument("--steps", type=int, help="distinct supersteps at granularity ipu")
    parser.add_argument("--tile-steps", type=int, help="distinct supersteps at granularity tile")
    parser.add_argument("--sweep", type=int, nargs="*", help="sweep sizes in vertices")
    parser.add_argument(
        "--skip-library", action="store_true", help="skip the library-built graphs' rows"
    )
    parser.add_argument("--sweep-point", type=int, help=argparse.SUPPRESS)  # child mode: rows
    args = parser.parse_args(argv)
    if args.sweep_point is not None:
        print(json.dumps(sweep_point(args.sweep_point)))
        return 0

    quick = args.quick
    steps = args.steps or (20 if quick else 200)
    tile_steps = args.tile_steps or (5 if quick else 100)
    rows, cols = (1000, 100) if quick else (10000, 1000)
    tut7 = load_tut7()
    time_tut7(tut7, "model-ipu2", 64, 8)  # untimed: JIT of the codelets
    time_distinct_steps("ipu", 2)
    figures: list[Figure] = []
    ok = True

    log(f"distinct supersteps: {steps} at ipu, {tile_steps} at tile")
    for gran, n in (("ipu", steps), ("tile", tile_steps)):
        # fresh graph, engine and machine each time (no cost is reused); the first
        # large run of a process also pays its first touches of host memory
        tries = [time_distinct_steps(gran, n) for _ in range(DISTINCT_TRIES)]
        r = max(tries, key=lambda x: x.rate)
        spread = (
            f"; best of {DISTINCT_TRIES} fresh engines "
            f"({fmt_rate(min(x.rate for x in tries))} to {fmt_rate(r.rate)}/s)"
        )
        ref = machine_distinct_rate(gran, n)
        target = 10_000 if gran == "ipu" else 200
        floor = ""
        if gran == "tile":
            tiles = load_config("mk1").num_tiles
            floor = (
                "; SimPy alone, a process per tile meeting at one barrier a step: "
                f"{fmt_rate(simpy_floor_rate(tiles, n))}/s"
            )
        figures.append(
            Figure(
                f"distinct supersteps/s, granularity {gran} "
                f"({n} steps, {r.vertices:,} vertices, mk1)",
                fmt_rate(r.rate),
                f"≥{target:,}",
                f"{r.rate / target:.3f} of target{spread}; machine model alone (IR): "
                f"{fmt_rate(ref)}/s" + floor,
            )
        )

    log(f"tutorial 7 {rows}x{cols} on model-ipu2")
    t = time_tut7(tut7, "model-ipu2", rows, cols)
    ok &= t.ok
    numpy_s = numpy_matvec_seconds(rows, cols)
    build = t.vertices / t.build_s
    build_nogc = t.vertices / build_seconds_without_gc(rows, cols)
    comp = t.vertices / t.compile_s
    execs = t.vertices / t.run_s
    e2e = t.total_s / numpy_s
    size = f"tut7 {rows}x{cols}, {t.vertices:,} vertices"
    figures += [
        Figure(
            f"graph build, vertices/s ({size})",
            fmt_rate(build),
            "≥100 k",
            f"{build / 1e5:.3f} of target; with the cyclic GC paused: {fmt_rate(build_nogc)}/s "
            "(the difference is the collector's share)",
        ),
        Figure(
            f"compile (lowering), vertices/s ({size})",
            fmt_rate(comp),
            "≥200 k",
            f"{comp / 2e5:.3f} of target",
        ),
        Figure(
            f"vertex executions/s in a run ({size})",
            fmt_rate(execs),
            "≥2 M",
            f"{execs / 2e6:.3f} of target",
        ),
    ]

    log("tutorial 7 peak RAM (child process)")
    status, wall, rss, _ = child_peak([sys.executable, str(TUT7), str(rows), str(cols)])
    ok &= status == 0
    figures.append(
        Figure(
            f"tutorial 7 {rows}x{cols} peak host RAM",
            f"{rss / MB:,.0f} MB",
            "≤400 MB",
            f"{rss / (400 * MB):.2f}x the target; child wall {wall:.1f} s, exit {status}",
        )
    )
    figures.append(
        Figure(
            f"tutorial 7 {rows}x{cols} end to end / numpy's matvec",
            f"{e2e:,.0f}x",
            "≤1,000x",
            f"{t.total_s:.2f} s / numpy {numpy_s * 1e3:.3f} ms; {e2e / 1000:.2f}x the target",
        )
    )
    if args.skip_big or quick:
        figures.append(
            Figure("tutorial 4 `--oom` peak host RAM", "not run (--skip-big/--quick)", "≤3 GB", "-")
        )
    else:
        log("tutorial 4 --oom peak RAM (child process)")
        status, wall, rss, _ = child_peak([sys.executable, str(TUT4), "--oom"])
        figures.append(
            Figure(
                "tutorial 4 `--oom` peak host RAM",
                f"{rss / (1 << 30):.2f} GB",
                "≤3 GB",
                f"{rss / (3 << 30):.2f}x the target; child wall {wall:.1f} s, exit {status}",
            )
        )
    if not args.skip_library:
        figures += library_figures()
    print(table(figures))

    sizes = args.sweep or ([10_000] if quick else [10_000, 100_000, 1_000_000])
    if args.skip_big:
        sizes = [s for s in sizes if s < 1_000_000]
    print()
    print(
        f"Scaling sweep: tut7 graph, split {SWEEP_SPLIT}, {SWEEP_COLS} columns, "
        "model-ipu2, one process each"
    )
    print()
    print(
        "| vertices | build s | compile s | run s | peak RAM MB | build µs/v "
        "| compile µs/v | run µs/v | RAM KB/v | result |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for size in sizes:
        n_rows = max(1, size // (SWEEP_SPLIT + 1))
        log(f"sweep: {size:,} vertices")
        status, _, rss, out = child_peak([sys.executable, __file__, "--sweep-point", str(n_rows)])
        if status != 0:
            print(f"| {size:,} | failed (exit {status}) | | | | | | | | |")
            ok = False
            continue
        p = json.loads(out.strip().splitlines()[-1])
        v = p["vertices"]
        ok &= bool(p["ok"])
        print(
            f"| {v:,} | {p['build_s']:.2f} | {p['compile_s']:.2f} | {p['run_s']:.2f} "
            f"| {rss / MB:,.0f} | {p['build_s'] / v * 1e6:.1f} "
            f"| {p['compile_s'] / v * 1e6:.1f} | {p['run_s'] / v * 1e6:.2f} "
            f"| {rss / v / 1024:.2f} | {'OK' if p['ok'] else 'WRONG'} |"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
