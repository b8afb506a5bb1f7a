"""Build and compile rates of library-built graphs: what real programs pay.

Tutorial 7's graph is built by hand, one vertex per API call with consecutive
connections; real programs are built by Poplibs and PopART. Each row here is a graph
made entirely by the libraries, timed in its own child process (so one row's Numba
caches and allocations do not help the next):

* ``cnn step``: the training and evaluation programs of ``examples/cnn/cnn_digits.py``
  (batch 32, popops/poplin/popnn only) on model-ipu2: ``build`` and
  ``Engine(graph, programs)``.
* ``conv fwd`` and ``conv fwd+bwd+wu``: the FLOAT workloads of ``bench_conv.py`` (3x3,
  64 -> 64 channels, 32x32, batch 8) on model-ipu2.
* ``popart cnn``: the ``TrainingSession`` of ``examples/popart/cnn_digits.py``
  (batch 32, the example's 16 tiles); ``compile`` is the compilation of its step
  program (``Engine(graph, programs)``, from the engine's own log record), ``load``
  the ``Engine.load`` that ``prepareDevice`` ends with (attaching the compiled graph to
  the device: its host buffers and the machine's check of the program), ``build`` the
  rest of ``prepareDevice`` (the ONNX graph lowered to Poplar calls, the backward pass
  and the optimiser built). The other rows neither load nor count a load, so build
  means the same in every row; until 2026-12-01 the PopART rows' build included the
  load (about 4 ms of the 16-tile row's, 3 %).
* ``popart cnn 1472``: the same session on an IPU Model of 1,472 tiles, the tiles of
  the ``cnn step`` row's model-ipu2: the CNN of that row at its batch (the training
  step only; that row also builds an evaluation program) on as many tiles, so about
  as many vertices. On 16 tiles the libraries make about 65
  times fewer vertices for the same elements (1,493 against 98,013), each with that
  much more work, so vertices per host second are lower there; this row compares the
  PopART path with the Poplar one on equal terms.

Each row also gives the elements of the graph's variables and constants and elements
per host second of building and compiling: the rows differ by some 35 times in
elements per vertex (the ``cnn step`` and ``popart cnn 1472`` about 57, ``conv fwd``
about 2,000: as many elements as the CNN step in 34 times fewer vertices), and work
that goes with the elements (mapping, connecting, exchanging them) is then counted
per vertex in vertices per second.

Each row gives vertices, host seconds and vertices per host second of building and of
compiling: CPU seconds of the child process (``time.process_time``; on a shared machine
other jobs change wall seconds far more). They are timed the second time the child builds and
compiles the graph (as tutorial 7 is timed after a warm-up: the first time also pays
Numba's loading and compiling of the codelets' loops, shown as the cold seconds). Between
the two the child runs a full collection of Python's cyclic garbage collector: the
warm-up leaves some 140 k more objects tracked by the collector than the imports did
(Numba's loaded kernels, modules imported on first use), and the collector's next full
pass over everything fell inside the timed build (0.26 to 0.29 s of the CNN step's
build, measured in three children; a third and fourth build in one process ran no
full collection). The
convolutions' plans are searched for again in the timed round: the process's shared
plans (``poplar_api.poplin.shared_plans``, which the warm-up filled) are cleared
before it, so its build pays the planning a program building one graph pays. A third
round, with the plans the timed round made kept, gives the build of a second graph of
the same convolutions in a process (``build_shared_s``). The
targets are those asked of tutorial 7 (build >= 100 k vertices/s, compile >= 200 k
vertices/s). ``bench_scale.py`` prints the same rows in its table.

Run::

    python benchmarks/bench_library.py [--only NAME ...]
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: Targets asked of every graph, in vertices per host second.
BUILD_TARGET = 100_000
COMPILE_TARGET = 200_000
#: Rows in the order they run.
WORKLOADS = ("cnn step", "conv fwd", "conv fwd+bwd+wu", "popart cnn", "popart cnn 1472")
#: Tiles of the IPU Model of each PopART row.
POPART_TILES = {"popart cnn": None, "popart cnn 1472": 1472}


@dataclass(frozen=True)
class Rate:
    """One library-built graph: its size and the host seconds to build and compile it."""

    workload: str
    vertices: int
    build_s: float
    compile_s: float
    #: build + compile seconds of the first time in the process (Numba loads and
    #: compiles the codelets' loops then; tutorial 7's rates are timed after a warm-up)
    cold_s: float = 0.0
    #: build seconds with the convolutions' plans taken from the process's shared plans
    #: (a second graph of the same convolutions); 0 when not measured
    build_shared_s: float = 0.0
    #: elements of the graph's variables and constants (0: not counted)
    elements: int = 0
    #: seconds of ``Engine.load`` (the PopART rows, whose ``prepareDevice`` loads the
    #: engine; counted in neither build nor compile); 0 for the rows that do not load
    load_s: float = 0.0

    @property
    def build_rate(self) -> float:
        """Vertices built per host second."""
        return self.vertices / self.build_s

    @property
    def compile_rate(self) -> float:
        """Vertices compiled per host second."""
        return self.vertices / self.compile_s


def _cnn_step() -> tuple[Any, float, float]:
    sys.path[:0] = [str(ROOT / "examples" / "cnn"), str(ROOT / "examples" / "tutorials")]
    import cnn_digits
    import mnist

    from poplar_api import Engine, Graph, IPUModel

    images, labels = mnist.load_digits_as_mnist()
    batch = 32
    _, _, eval_batches = cnn_digits.padded_eval_data(images, labels, batch)
    device = IPUModel("ipu2").createDevice()
    t0 = time.process_time()
    graph = Graph(device.getTarget())
    programs = cnn_digits.build(graph, batch, 0.05, eval_batches)
    t1 = time.process_time()
    Engine(graph, programs)
    t2 = time.process_time()
    return graph, t1 - t0, t2 - t1


def _conv(passes: bool) -> tuple[Any, float, float]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_conv

    from poplar_api import FLOAT, Engine, Graph, IPUModel

    params = bench_conv.conv_params(FLOAT)
    device = IPUModel("ipu2").createDevice()
    t0 = time.process_time()
    graph = Graph(device.getTarget())
    seq = bench_conv.build(graph, params, passes)[0]
    t1 = time.process_time()
    Engine(graph, seq)
    t2 = time.process_time()
    return graph, t1 - t0, t2 - t1


class _Timings(logging.Handler):
    """Keeps the CPU seconds the engine logs for compiling its programs."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.compile_cpu: float | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("compiled ") and record.args:
            self.compile_cpu = float(record.args[-1])


class _LoadTimer:
    """Sums the CPU seconds of ``Engine.load`` calls while it is entered."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __enter__(self) -> _LoadTimer:
        from poplar_api import Engine

        self._load = load = Engine.load

        def timed(engine: Any, device: Any) -> None:
            t0 = time.process_time()
            try:
                load(engine, device)
            finally:
                self.seconds += time.process_time() - t0

        Engine.load = timed  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        from poplar_api import Engine

        Engine.load = self._load  # type: ignore[method-assign]


def _popart_cnn(tiles: int | None) -> tuple[Any, float, float, float]:
    """The PopART row on an IPU Model of ``tiles`` tiles (the example's default if
    None): its graph and the build, compile and load seconds of ``prepareDevice``."""
    sys.path.insert(0, str(ROOT / "examples" / "popart"))
    import cnn_digits as example
    import popart_common as common

    import popart_api as popart
    from poplar_api.logging_config import logger as poplar_logger

    timings = _Timings()
    logger = poplar_logger("ENGINE")  # (the logging configuration is read first)
    logger.addHandler(timings)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    model = example.build_model(example.initial_weights(example.DEFAULT_SEED), example.BATCH)
    session = popart.TrainingSession(
        fnModel=model.proto,
        dataFlow=popart.DataFlow(1, {model.loss: popart.AnchorReturnType("ALL")}),
        deviceInfo=common.ipu_model(1, tiles or common.DEFAULT_TILES),
        loss=model.loss,
        optimizer=example.make_optimizer("constsgd", example.LEARNING_RATE),
    )
    with _LoadTimer() as loading:
        t0 = time.process_time()
        session.prepareDevice()
        total = time.process_time() - t0
    logger.removeHandler(timings)
    if timings.compile_cpu is None:
        raise RuntimeError("the engine logged no compile time")
    build = total - timings.compile_cpu - loading.seconds
    return session.graph, build, timings.compile_cpu, loading.seconds


def measure(workload: str) -> Rate:
    """Build and compile ``workload`` (one of :data:`WORKLOADS`) in this process."""
    load = 0.0
    if workload == "cnn step":
        graph, b, c = _cnn_step()
    elif workload in ("conv fwd", "conv fwd+bwd+wu"):
        graph, b, c = _conv(workload != "conv fwd")
    elif workload in POPART_TILES:
        graph, b, c, load = _popart_cnn(POPART_TILES[workload])
    else:
        raise ValueError(f"unknown workload {workload!r}; one of {', '.join(WORKLOADS)}")
    elements = sum(v.size for v in graph.getVariables())
    return Rate(workload, graph.getNumVertices(), b, c, elements=elements, load_s=load)


def measure_in_child(workload: str) -> Rate:
    """:func:`measure` in a fresh Python process (nothing cached from other rows)."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", workload],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{workload}: child failed:\n{out.stderr[-2000:]}")
    return Rate(**json.loads(out.stdout.strip().splitlines()[-1]))


def table(rates: Sequence[Rate]) -> str:
    """The rows as a markdown table, each rate with its target."""
    lines = [
        "| graph | vertices | build s | build vertices/s | compile s | compile vertices/s "
        "| load s | cold build + compile s | build s, plans shared | elements | build, "
        "compile M elements/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rates:
        per_s = (
            f"{r.elements / r.build_s / 1e6:.1f}, {r.elements / r.compile_s / 1e6:.1f}"
            if r.elements
            else "-"
        )
        lines.append(
            f"| {r.workload} | {r.vertices:,} | {r.build_s:.2f} | {r.build_rate:,.0f} "
            f"({r.build_rate / BUILD_TARGET:.2f} of target) | {r.compile_s:.2f} | "
            f"{r.compile_rate:,.0f} ({r.compile_rate / COMPILE_TARGET:.2f} of target) | "
            f"{r.load_s:.3f} | {r.cold_s:.2f} | {r.build_shared_s:.2f} | {r.elements:,} | "
            f"{per_s} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Measure the rows (each in a child process) and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=WORKLOADS, help="rows to measure")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # child mode: one workload
    args = parser.parse_args(argv)
    if args.child:
        from poplar_api.poplin import shared_plans

        cold = measure(args.child)
        shared_plans.clear()  # the timed build searches for its plans
        gc.collect()  # the warm-up's objects walked now, not in the timed build
        r = measure(args.child)
        shared = measure(args.child)  # the plans of the timed build kept
        r = Rate(r.workload, r.vertices, r.build_s, r.compile_s,
                 cold.build_s + cold.compile_s, shared.build_s, r.elements,
                 r.load_s)  # fmt: skip
        print(json.dumps(r.__dict__))
        return 0
    rates = []
    for w in args.only or WORKLOADS:
        print(f"measuring {w} ...", file=sys.stderr, flush=True)
        rates.append(measure_in_child(w))
    print(table(rates))
    return 0


if __name__ == "__main__":
    sys.exit(main())
