"""A two-stage model-parallel pipeline on two IPUs.

Stage 1 runs on IPU 0, stage 2 on IPU 1, each a stack of ``--layers`` dense layers
``t = relu(t @ W)`` built with ``poplin.matMul`` and ``popnn.nonLinearityInPlace`` on a
virtual graph over its IPU's tiles (``graph.createVirtualGraph``): stage 1 maps the
``--io-features`` inputs to ``--features`` hidden units, stage 2 maps them back.
Micro-batches ``x`` are streamed in to IPU 0 one at a time; the activations ``h`` go
from IPU 0 to IPU 1 with a ``Copy`` (a global exchange over the IPU-Links) and the
results ``y`` are streamed out from IPU 1. Program 0 loads the weights once; program 1
is the pipeline, with the classic fill / steady state / drain schedule::

    load x0; stage 1; send h
    repeat N-1 times: load x(k+1); stage 1 (x(k+1)); stage 2 (h(k)); store y(k); send h
    stage 2; store y(N-1)

Stage 1 and stage 2 of the steady state touch different IPUs, and an IPU skips the
syncs of the other's on-chip exchanges, so IPU 0 runs stage 1 of micro-batch k+1
while IPU 1 runs stage 2 of micro-batch k: the stages overlap in the timeline (one
track per IPU). The script checks ``y`` against numpy and prints, for the pipeline's
run, the total cycles, each stage's cycles (the steps its IPU runs on its own:
compute, on-chip exchange and their internal syncs, each counted for its slowest
tile), their sum and the overlap (how much shorter the run is than the stages one
after the other). ``--timeline PATH`` writes the Perfetto timeline of that run.

Run::

    python examples/multi_ipu/pipeline.py [--device model-ipu1|model-ipu2]
        [--micro-batches N] [--batch B] [--features F] [--io-features F]
        [--layers L] [--timeline PATH]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ipusim.sweep.cli import positive_int
from poplar_api import FLOAT, Device, Engine, Graph, IPUModel, SyncDelayType, poplin, popnn
from poplar_api import program as prog
from poplar_api.errors import GraphError

#: ``--device`` choices and the IPU version each models.
DEVICES = {"model-ipu1": "ipu1", "model-ipu2": "ipu2"}
DEFAULT_DEVICE = "model-ipu2"
#: IPUs of the pipeline: one per stage.
NUM_IPUS = 2
DEFAULT_MICRO_BATCHES = 8
DEFAULT_BATCH = 16
DEFAULT_FEATURES = 512
DEFAULT_IO_FEATURES = 32
DEFAULT_LAYERS = 3
#: Largest error accepted against numpy, relative to max(1, |expected|).
RELATIVE_TOLERANCE = 1e-4
#: Seed of the host data.
SEED = 7


def create_device(device: str | IPUModel = DEFAULT_DEVICE) -> Device:
    """An IPU Model of two IPUs (``"model-ipu1"``/``"model-ipu2"`` or an
    :class:`IPUModel`, whose ``numIPUs`` is set to 2), with tut7's sync settings."""
    if isinstance(device, IPUModel):
        model = device
    else:
        if device not in DEVICES:
            raise GraphError(f"pipeline: unknown device {device!r}; choose one of {list(DEVICES)}")
        model = IPUModel(DEVICES[device])
    model.numIPUs = NUM_IPUS
    model.minIPUSyncDelay = 0
    model.relativeSyncDelay = SyncDelayType.NO_DELAY
    return model.createDevice()


@dataclass(frozen=True)
class Shape:
    """Sizes of the pipeline."""

    micro_batches: int = DEFAULT_MICRO_BATCHES
    batch: int = DEFAULT_BATCH
    features: int = DEFAULT_FEATURES
    io_features: int = DEFAULT_IO_FEATURES
    layers: int = DEFAULT_LAYERS

    def weight_shapes(self) -> list[list[tuple[int, int]]]:
        """``[stage][layer] -> (in, out)``: io -> hidden ... hidden -> io."""
        f, io, n = self.features, self.io_features, self.layers
        first = [(io if k == 0 else f, f) for k in range(n)]
        second = [(f, io if k == n - 1 else f) for k in range(n)]
        return [first, second]


@dataclass
class Pipeline:
    """What :func:`build` made: the graph, program 0 (load the weights) and program 1
    (the pipeline)."""

    graph: Graph
    programs: list[prog.Sequence]


def _stage(graph: Graph, x, shapes, batch: int, stage: int, weights: list) -> tuple:
    """The layers of one stage on ``graph`` (an IPU's virtual graph): ``relu(t @ W)``
    each. Returns the stage's program and output."""
    seq = prog.Sequence(debugContext=f"stage{stage}")
    t = x
    for k, (fin, fout) in enumerate(shapes):
        w = poplin.createMatMulInputRHS(graph, FLOAT, [batch, fin], [fin, fout], f"W{stage}.{k}")
        weights.append((f"W{stage}.{k}", w))
        t = poplin.matMul(graph, t, w, seq, f"stage{stage}/layer{k}")
        popnn.nonLinearityInPlace(
            graph, popnn.NonLinearityType.RELU, t, seq, f"stage{stage}/relu{k}"
        )
    return seq, t


def build(graph: Graph, shape: Shape) -> Pipeline:
    """The two stages, the streams (``x`` and one per weight in, ``y`` out) and the
    two programs."""
    target = graph.getTarget()
    if target.getNumIPUs() < NUM_IPUS:
        raise GraphError(
            f"pipeline: the target has {target.getNumIPUs()} IPU(s); it needs {NUM_IPUS}; "
            f"hint: IPUModel(...).numIPUs = {NUM_IPUS}"
        )
    tpi = target.getTilesPerIPU()
    ipus = [graph.createVirtualGraph(i * tpi, (i + 1) * tpi) for i in range(NUM_IPUS)]
    (s1, s2), b = shape.weight_shapes(), shape.batch
    weights: list = []
    # poplin and popnn register the vertices they use as they add them
    x = poplin.createMatMulInputLHS(ipus[0], FLOAT, [b, s1[0][0]], list(s1[0]), "x")
    stage1, h = _stage(ipus[0], x, s1, b, 1, weights)
    a = poplin.createMatMulInputLHS(ipus[1], FLOAT, [b, s2[0][0]], list(s2[0]), "a")
    stage2, y = _stage(ipus[1], a, s2, b, 2, weights)

    load_weights = prog.Sequence(debugContext="load weights")
    for name, w in weights:
        stream = graph.addHostToDeviceFIFO(name, FLOAT, w.numElements())
        load_weights.add(prog.Copy(stream, w, f"load {name}"))
    x_in = graph.addHostToDeviceFIFO("x", FLOAT, x.numElements())
    y_out = graph.addDeviceToHostFIFO("y", FLOAT, y.numElements())

    def load() -> prog.Copy:
        return prog.Copy(x_in, x, "load x")

    def send() -> prog.Copy:
        return prog.Copy(h, a, "send h IPU0->IPU1")  # a global exchange

    def store() -> prog.Copy:
        return prog.Copy(y, y_out, "store y")

    pipeline = prog.Sequence(
        [
            prog.Sequence([load(), stage1, send()], "fill"),
            prog.Repeat(
                shape.micro_batches - 1,
                prog.Sequence([load(), stage1, stage2, store(), send()], "steady"),
            ),
            prog.Sequence([stage2, store()], "drain"),
        ]
    )
    return Pipeline(graph, [load_weights, pipeline])


def host_data(shape: Shape) -> dict[str, np.ndarray]:
    """Micro-batches ``x`` [N, batch, io] and the weights ``W<stage>.<layer>`` (float32)."""
    rng = np.random.default_rng(SEED)
    data = {
        "x": rng.standard_normal((shape.micro_batches, shape.batch, shape.io_features)).astype(
            np.float32
        )
    }
    for stage, shapes in enumerate(shape.weight_shapes(), start=1):
        for k, (fin, fout) in enumerate(shapes):
            w = rng.standard_normal((fin, fout)) * np.sqrt(2.0 / fin)
            data[f"W{stage}.{k}"] = w.astype(np.float32)
    return data


def reference(data: dict[str, np.ndarray], shape: Shape) -> np.ndarray:
    """The layers of both stages per micro-batch, in float64."""
    t = data["x"].astype(np.float64)
    for stage, shapes in enumerate(shape.weight_shapes(), start=1):
        for k in range(len(shapes)):
            t = np.maximum(t @ data[f"W{stage}.{k}"].astype(np.float64), 0.0)
    return t


def stage_cycles(trace) -> list[int]:
    """Busy cycles of each IPU (index = IPU = stage): the cycles during which some
    tile of the IPU is in a step the IPU runs on its own (compute, on-chip exchange,
    internal sync), each tile's slice of a step lying where its clock was (the union
    of those spans, so steps that overlap on different tiles count once)."""
    n, tpi = trace.num_ipus, trace.tiles_per_ipu
    clock = np.zeros(trace.num_tiles, np.int64)
    spans: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for rec in trace.records:
        cycles = np.asarray(rec.tile_cycles, np.int64)
        own = rec.phase in ("compute", "internal_exchange")
        if rec.kind == "sync" and rec.step is not None:
            own = rec.step.sync_kind.value == "internal"
        if own:
            for ipu in range(n):
                part = slice(ipu * tpi, (ipu + 1) * tpi)
                busy = cycles[part] > 0
                if busy.any():
                    start, end = clock[part][busy], clock[part][busy] + cycles[part][busy]
                    spans[ipu].append((int(start.min()), int(end.max())))
        clock += cycles
    out = []
    for ipu_spans in spans:
        total, reach = 0, 0
        for lo, hi in sorted(ipu_spans):
            lo = max(lo, reach)
            if hi > lo:
                total += hi - lo
                reach = hi
        out.append(total)
    return out


@dataclass
class Result:
    """What :func:`run` returns (cycle figures of the pipeline's run)."""

    result: np.ndarray
    expected: np.ndarray
    ok: bool
    total_cycles: int
    stage_cycles: list[int]
    engine: Engine

    @property
    def overlap_cycles(self) -> int:
        """Sum of the stages' cycles minus the run's total cycles."""
        return sum(self.stage_cycles) - self.total_cycles


def run(device: Device, shape: Shape = Shape(), timeline: str | None = None) -> Result:
    """Build, run and check the pipeline on ``device``; print the cycle figures."""
    graph = Graph(device.getTarget())
    built = build(graph, shape)
    engine = Engine(graph, built.programs)
    engine.load(device)
    data = host_data(shape)
    out_shape = (shape.micro_batches, shape.batch, shape.io_features)
    result = np.zeros(out_shape, np.float32)
    for name, values in data.items():
        engine.connectStream(name, values.reshape(-1))
    engine.connectStream("y", result.reshape(-1))
    engine.run(0, "load weights")
    engine.run(1, "pipeline")

    expected = reference(data, shape)
    err = np.abs(result - expected) / np.maximum(np.abs(expected), 1.0)
    ok = bool((err <= RELATIVE_TOLERANCE).all())
    print(
        f"Pipeline of {shape.micro_batches} micro-batch(es) of {shape.batch} x "
        f"{shape.io_features}, {shape.layers} layer(s) of {shape.features} per stage:",
        "result OK" if ok else f"result incorrect (max relative error {err.max():.3g})",
    )
    trace = engine.getTraces()[-1]
    stages = stage_cycles(trace)
    total = trace.total_cycles
    print(f"Total cycles (pipeline run):  {total:,}")
    for k, c in enumerate(stages):
        print(f"Stage {k + 1} cycles (IPU {k}):      {c:,}")
    print(f"Sum of the stages' cycles:    {sum(stages):,}")
    print(
        f"Overlap:                      {sum(stages) - total:,} cycles "
        f"(sum of the stages / total = {sum(stages) / total:.2f})"
    )
    if timeline:
        from ipusim.profile.timeline import write_timeline

        print(f"Timeline written to {write_timeline(trace, timeline)}")
    return Result(result, expected, ok, total, stages, engine)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns 0 when the result is correct, else 1."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device", choices=sorted(DEVICES), default=DEFAULT_DEVICE, help="IPU Model to run on"
    )
    parser.add_argument("--micro-batches", type=positive_int, default=DEFAULT_MICRO_BATCHES)
    parser.add_argument("--batch", type=positive_int, default=DEFAULT_BATCH)
    parser.add_argument("--features", type=positive_int, default=DEFAULT_FEATURES)
    parser.add_argument("--io-features", type=positive_int, default=DEFAULT_IO_FEATURES)
    parser.add_argument("--layers", type=positive_int, default=DEFAULT_LAYERS)
    parser.add_argument("--timeline", help="write the Perfetto timeline (JSON) to this path")
    args = parser.parse_args(argv)
    shape = Shape(args.micro_batches, args.batch, args.features, args.io_features, args.layers)
    outcome = run(create_device(args.device), shape, args.timeline)
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
