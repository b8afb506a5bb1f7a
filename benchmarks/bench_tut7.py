"""Wall time of each phase of tutorial 7 (matrix-vector product) on the IPU Models.

The tutorial's own functions are imported from ``examples/tutorials/tut7.py`` (not
copied): the split is chosen with its cost model, the graph is built with its
``build``, compiled by constructing the :class:`~poplar_api.Engine`, loaded on the
device and run once. Each phase is timed with ``time.perf_counter``; the result is
checked against a float64 product as the tutorial does. An untimed 64x8 run comes
first so that one-off JIT compilation is not charged to the first device.

Run::

    python benchmarks/bench_tut7.py [--quick] [--rows R] [--cols C] [--device D ...] [--no-warmup]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

from poplar_api import Engine, Graph

TUT7_PATH = Path(__file__).resolve().parent.parent / "examples" / "tutorials" / "tut7.py"


def load_tut7(path: Path = TUT7_PATH) -> ModuleType:
    """Import the tutorial script as a module (it is not part of a package)."""
    spec = importlib.util.spec_from_file_location("tut7", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import tutorial 7 from {path}; hint: run from the checkout")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Tut7Timing:
    """Wall seconds of each phase of one tutorial 7 run, and what it produced."""

    device: str
    rows: int
    cols: int
    split: int
    vertices: int
    cost_model_s: float
    build_s: float
    compile_s: float
    load_s: float
    run_s: float
    total_cycles: int
    ok: bool

    @property
    def total_s(self) -> float:
        """Sum of the timed phases."""
        return self.cost_model_s + self.build_s + self.compile_s + self.load_s + self.run_s


def time_tut7(
    tut7: ModuleType, device_name: str, rows: int, cols: int, split: int | None = None
) -> Tut7Timing:
    """Choose the split (unless ``split`` is given: no cost model is run), build,
    compile, load and run tutorial 7 once, timing each phase."""
    device = tut7.create_device(device_name)
    target = device.getTarget()
    t0 = time.perf_counter()
    if split is None:
        split = tut7.choose_split_for(target, rows, cols)[0].split
    t1 = time.perf_counter()
    graph = Graph(target)
    built = tut7.build(graph, rows, cols, split)
    t2 = time.perf_counter()
    engine = Engine(graph, built.program)
    t3 = time.perf_counter()
    engine.load(device)
    t4 = time.perf_counter()
    matrix, vector = tut7.host_data(rows, cols)
    result = np.zeros(rows, np.float32)
    tut7.connect_streams(engine, matrix, vector, result)
    t5 = time.perf_counter()
    engine.run(0)
    t6 = time.perf_counter()
    expected = tut7.host_product(matrix, vector)
    ok = bool((tut7.relative_errors(result, expected) <= tut7.RELATIVE_TOLERANCE).all())
    trace = engine.getTrace()
    return Tut7Timing(
        device=device_name,
        rows=rows,
        cols=cols,
        split=split,
        vertices=graph.getNumVertices(),
        cost_model_s=t1 - t0,
        build_s=t2 - t1,
        compile_s=t3 - t2,
        load_s=t4 - t3,
        run_s=t6 - t5,
        total_cycles=trace.total_cycles if trace is not None else 0,
        ok=ok,
    )


def format_table(rows: Sequence[Tut7Timing]) -> str:
    """The timings as a markdown table (seconds; vertices/s for build and compile)."""
    head = (
        "| device | size | split | vertices | cost model s | build s | build vert/s "
        "| compile s | compile vert/s | load s | run s | total s | simulated cycles | result |"
    )
    lines = [head, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(
            f"| {r.device} | {r.rows}x{r.cols} | {r.split} | {r.vertices:,} "
            f"| {r.cost_model_s:.2f} | {r.build_s:.2f} | {r.vertices / r.build_s:,.0f} "
            f"| {r.compile_s:.2f} | {r.vertices / r.compile_s:,.0f} | {r.load_s:.3f} "
            f"| {r.run_s:.2f} | {r.total_s:.2f} | {r.total_cycles:,} "
            f"| {'OK' if r.ok else 'WRONG'} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Time tutorial 7 on each device and print the table; 0 when every result is OK."""
    tut7 = load_tut7()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run at 1000x100")
    parser.add_argument("--rows", type=tut7.positive_int, default=tut7.DEFAULT_ROWS)
    parser.add_argument("--cols", type=tut7.positive_int, default=tut7.DEFAULT_COLS)
    parser.add_argument(
        "--device",
        action="append",
        choices=sorted(tut7.DEVICES),
        help="device to time (repeatable; default: model-ipu1 and model-ipu2)",
    )
    parser.add_argument(
        "--no-warmup",
        action="store_true",
        help="do not run an untimed 64x8 product first (the first row then includes JIT time)",
    )
    args = parser.parse_args(argv)
    rows, cols = (1000, 100) if args.quick else (args.rows, args.cols)
    if cols < 2:
        parser.error(f"--cols must be at least 2 to split the columns, got {cols}")
    devices = args.device or ["model-ipu1", "model-ipu2"]
    if not args.no_warmup:
        # untimed: JIT-compiles the codelets and numba kernels once for the process
        time_tut7(tut7, devices[0], 64, 8)
    timings = []
    for name in devices:
        timing = time_tut7(tut7, name, rows, cols)
        timings.append(timing)
        print(f"{name}: {timing.total_s:.2f} s", file=sys.stderr, flush=True)
    print(format_table(timings))
    return 0 if all(t.ok for t in timings) else 1


if __name__ == "__main__":
    sys.exit(main())
