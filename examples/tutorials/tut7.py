"""Tutorial 7: matrix-vector multiplication, split over the columns to use every tile.

Each row is cut into ``colsAxisSplit`` segments; one dot-product vertex per segment and
row writes a partial sum, then one reduce vertex per row adds the row's partials. A
small integer cost model picks the split before the graph is built. The host checks
the result against a float64 product and the profile summary is printed.

Run::

    python examples/tutorials/tut7.py [--device model-ipu1|model-ipu2] [ROWS COLS]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from poplar_api import FLOAT, ComputeSet, Device, Engine, Graph, IPUModel, SyncDelayType, Tensor
from poplar_api import program as prog
from poplar_api.codelet import Input, Output, Vector, Vertex
from poplar_api.device import Target
from poplar_api.errors import GraphError
from poplar_api.workload import Workload

DEFAULT_ROWS = 10000
DEFAULT_COLS = 1000
#: ``--device`` choices and the IPU version each models.
DEVICES = {"model-ipu1": "ipu1", "model-ipu2": "ipu2"}
DEFAULT_DEVICE = "model-ipu2"
#: Largest relative error accepted by the host check.
RELATIVE_TOLERANCE = 1e-5
#: Bytes of one FLOAT element.
FLOAT_BYTES = 4


class DotProductVertex(Vertex):
    """``out`` = sum over i of ``a[i] * b[i]``, accumulated in float32 in index order."""

    a = Input(Vector(FLOAT))
    b = Input(Vector(FLOAT))
    out = Output(FLOAT)

    @staticmethod
    def compute(a, b, out):
        total = np.float32(0.0)
        for i in range(a.shape[0]):
            total += a[i] * b[i]
        out[0] = total
        return True


class ReduceVertex(Vertex):
    """``out`` = sum of the elements of ``in``, accumulated in float32 in index order."""

    in_ = Input(Vector(FLOAT))
    out = Output(FLOAT)

    @staticmethod
    def compute(in_, out):
        total = np.float32(0.0)
        for i in range(in_.shape[0]):
            total += in_[i]
        out[0] = total
        return True


def cdiv(a: int, b: int) -> int:
    """Integer division rounding up (``a, b >= 0``, ``b > 0``)."""
    return (a + b - 1) // b


def dot_product_cycles(length: int) -> int:
    """Estimate of a DotProductVertex over ``length`` elements: 5 + two per cycle."""
    return 5 + (length + 1) // 2


def reduce_cycles(length: int) -> int:
    """Estimate of a ReduceVertex over ``length`` partials: 5 + two per cycle."""
    return 5 + (length + 1) // 2


@dataclass(frozen=True)
class SplitCost:
    """Cost-model cycles of one column split.

    Attributes
    ----------
    split
        Number of column segments (``colsAxisSplit``).
    compute, exchange
        Cycles of the dot-product compute set on its busiest tile, and of moving a
        segment of the input vector to it.
    reduce_exchange, reduce_compute
        Cycles of gathering a row's partials, and of the reduce compute set.
    """

    split: int
    compute: int
    exchange: int
    reduce_exchange: int
    reduce_compute: int

    @property
    def total(self) -> int:
        """Sum of the four parts."""
        return self.compute + self.exchange + self.reduce_exchange + self.reduce_compute

    def describe(self) -> str:
        """The tutorial's one-line description of this split."""
        return (
            f"colsAxisSplit={self.split}, total cost={self.total} "
            f"(compute cost={self.compute}, exchange cost={self.exchange}, "
            f"reduce exchange cost={self.reduce_exchange}, "
            f"reduce compute cost={self.reduce_compute})"
        )


def split_cost(
    rows: int, cols: int, split: int, tiles: int, workers: int, exchange_bytes_per_cycle: int
) -> SplitCost:
    """Cost-model cycles of cutting every row into ``split`` segments (integer arithmetic).

    The dot products (``rows * split`` vertices) spread evenly over ``tiles`` tiles;
    a tile runs ``workers`` vertices at a time, each ``5 + (segment + 1) // 2``
    cycles; the reduce has one vertex per row of ``5 + (split + 1) // 2`` cycles.
    Exchange costs are the bytes a tile receives divided by the bytes per cycle.
    """
    e = exchange_bytes_per_cycle
    max_vertices = max(cdiv(rows * split, tiles), 1)
    segment = cdiv(cols, split)
    compute = cdiv(max_vertices, workers) * workers * dot_product_cycles(segment)
    exchange = cdiv(max_vertices, rows) * segment * FLOAT_BYTES // e
    max_reduce_vertices = max(cdiv(rows, tiles), 1)
    reduce_compute = cdiv(max_reduce_vertices, workers) * workers * reduce_cycles(split)
    reduce_exchange = max_reduce_vertices * split * FLOAT_BYTES // e
    return SplitCost(split, compute, exchange, reduce_exchange, reduce_compute)


def choose_split(
    rows: int, cols: int, tiles: int, workers: int, exchange_bytes_per_cycle: int
) -> tuple[SplitCost, int]:
    """Try every split ``1 .. cols-1``; return the first cheapest and the worst total.

    Raises
    ------
    GraphError
        ``rows < 1`` or ``cols < 2`` (no split to try), or a machine parameter is not
        a positive integer.
    """
    if rows < 1 or cols < 2:
        raise GraphError(
            f"tut7 cost model: a {rows}x{cols} matrix has no column split to try; it "
            f"needs rows >= 1 and cols >= 2"
        )
    for name, value in (
        ("tiles", tiles),
        ("workers", workers),
        ("exchange_bytes_per_cycle", exchange_bytes_per_cycle),
    ):
        if int(value) != value or value < 1:
            raise GraphError(
                f"tut7 cost model: {name}={value!r} must be a positive integer; hint: the "
                f"cost model uses integer arithmetic on the target's parameters"
            )
    tiles, workers = int(tiles), int(workers)
    e = int(exchange_bytes_per_cycle)
    best: SplitCost | None = None
    worst = 0
    for split in range(1, cols):
        cost = split_cost(rows, cols, split, tiles, workers, e)
        if best is None or cost.total < best.total:
            best = cost
        worst = max(worst, cost.total)
    assert best is not None  # cols >= 2 gives at least one split
    return best, worst


def choose_split_for(target: Target, rows: int, cols: int) -> tuple[SplitCost, int]:
    """:func:`choose_split` with the tile count, workers and exchange rate of ``target``."""
    return choose_split(
        rows,
        cols,
        target.getNumTiles(),
        target.getNumWorkerContexts(),
        target.getExchangeBytesPerCycle(),
    )


def host_data(rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """The tutorial's inputs: ``matrix[r][c] = r*c`` (float32, rows x cols), ``in[c] = c``."""
    vector = np.arange(cols, dtype=np.float32)
    matrix = np.outer(np.arange(rows, dtype=np.float32), vector).astype(np.float32)
    return matrix, vector


#: Rows of the matrix converted to float64 at a time by :func:`host_product`.
HOST_BLOCK_ROWS = 1024


def host_product(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """``matrix @ vector`` in float64, the reference the device's result is checked
    against; a block of rows at a time, so that a large matrix is not copied whole."""
    v64 = vector.astype(np.float64)
    out = np.empty(matrix.shape[0], np.float64)
    for r in range(0, matrix.shape[0], HOST_BLOCK_ROWS):
        block = matrix[r : r + HOST_BLOCK_ROWS]
        out[r : r + block.shape[0]] = block.astype(np.float64) @ v64
    return out


def relative_errors(result: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """``|result - expected| / |expected|`` per element.

    An exact match counts 0 (also where ``expected`` is 0); any difference from an
    expected 0 counts as infinite.
    """
    diff = np.abs(np.asarray(result, np.float64) - expected)
    scale = np.abs(expected)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(scale > 0, diff / np.where(scale > 0, scale, 1.0), np.inf)
    return np.where(diff == 0, 0.0, rel)


@dataclass
class MatVecGraph:
    """What :func:`build` made: the graph, its program and the tensors."""

    graph: Graph
    program: prog.Sequence
    matrix: object
    input_vector: object
    output_vector: object
    partials: object


def add_row_vertices(
    graph: Graph,
    mul_cs: ComputeSet,
    reduce_cs: ComputeSet,
    input_vector: Tensor,
    matrix_rows: list[Tensor],
    partial_rows: list[Tensor],
    outputs: list[Tensor],
    split: int,
) -> None:
    """Map ``n`` matrix rows, their partials and outputs over ``graph``'s ``T`` tiles and
    add the rows' dot-product vertices to ``mul_cs`` and reduce vertices to ``reduce_cs``.

    Segment ``i`` covers columns ``[i*cols // split, (i+1)*cols // split)``; its vertex
    for row ``r``, that piece of the row and the partial ``partial_rows[r][i]`` live on
    tile ``(i*n + r)*T // (split*n)``. The reduce vertex of row ``r`` and ``outputs[r]``
    live on tile ``r*T // n``.
    """
    tiles = graph.getTarget().getNumTiles()
    rows, cols = len(matrix_rows), input_vector.numElements()
    set_mapping, add_vertex = graph.setTileMapping, graph.addVertex
    set_estimate = graph.setPerfEstimate
    for i in range(split):
        begin, end = i * cols // split, (i + 1) * cols // split
        if end == begin:
            continue
        segment = input_vector.slice(begin, end)
        cycles = dot_product_cycles(end - begin)
        for r in range(rows):
            tile = (i * rows + r) * tiles // (split * rows)
            piece, partial = matrix_rows[r].slice(begin, end), partial_rows[r][i]
            set_mapping(piece, tile)
            set_mapping(partial, tile)
            vertex = add_vertex(
                mul_cs, "DotProductVertex", {"a": piece, "b": segment, "out": partial}
            )
            set_mapping(vertex, tile)
            set_estimate(vertex, cycles)
    cycles = reduce_cycles(split)
    for r in range(rows):
        tile = r * tiles // rows
        set_mapping(outputs[r], tile)
        vertex = add_vertex(reduce_cs, "ReduceVertex", {"in": partial_rows[r], "out": outputs[r]})
        set_mapping(vertex, tile)
        set_estimate(vertex, cycles)


def build(graph: Graph, rows: int, cols: int, split: int) -> MatVecGraph:
    """Add tensors, streams and the ``mulCS`` and ``reduceCS`` compute sets.

    With ``T`` tiles: input element ``c`` lives on tile ``c*T // cols``; the matrix,
    partials, outputs and vertices as :func:`add_row_vertices` lays them out.
    """
    graph.addCodelets([DotProductVertex, ReduceVertex])
    tiles = graph.getTarget().getNumTiles()
    matrix = graph.addVariable(FLOAT, [rows, cols], "matrix")
    input_vector = graph.addVariable(FLOAT, [cols], "inputVector")
    output_vector = graph.addVariable(FLOAT, [rows], "outputVector")
    partials = graph.addVariable(FLOAT, [rows, split], "partials")
    for c in range(cols):
        graph.setTileMapping(input_vector[c], c * tiles // cols)

    mul_cs = graph.addComputeSet("mulCS")
    reduce_cs = graph.addComputeSet("reduceCS")
    matrix_rows = [matrix[r] for r in range(rows)]
    partial_rows = [partials[r] for r in range(rows)]
    outputs = [output_vector[r] for r in range(rows)]
    add_row_vertices(
        graph, mul_cs, reduce_cs, input_vector, matrix_rows, partial_rows, outputs, split
    )

    in_stream = graph.addHostToDeviceFIFO("inputVector", FLOAT, cols)
    matrix_stream = graph.addHostToDeviceFIFO("inputMatrix", FLOAT, rows * cols)
    out_stream = graph.addDeviceToHostFIFO("out", FLOAT, rows)
    program = prog.Sequence(
        [
            prog.Copy(in_stream, input_vector),
            prog.Copy(matrix_stream, matrix),
            prog.Sequence(prog.Execute(mul_cs), prog.Execute(reduce_cs)),
            prog.Copy(output_vector, out_stream),
        ]
    )
    return MatVecGraph(graph, program, matrix, input_vector, output_vector, partials)


def create_device(device: str | IPUModel = DEFAULT_DEVICE, cpu: bool = False) -> Device:
    """The device to run on.

    Parameters
    ----------
    device
        ``"model-ipu1"`` or ``"model-ipu2"``, or an :class:`IPUModel` to use as given
        (after the tutorial's sync settings are applied to it).
    cpu
        Run on a CPU device with the tiles of that IPU version instead (values only).

    The IPU Model gets ``minIPUSyncDelay = 0`` and ``relativeSyncDelay = NO_DELAY``.

    Raises
    ------
    GraphError
        ``device`` is not one of :data:`DEVICES` (nor an IPUModel).
    """
    if isinstance(device, IPUModel):
        model = device
    else:
        if device not in DEVICES:
            raise GraphError(f"tut7: unknown device {device!r}; choose one of {', '.join(DEVICES)}")
        if cpu:
            return Device.createCPUDevice(DEVICES[device])
        model = IPUModel(DEVICES[device])
    if cpu:
        return Device.createCPUDevice(model.config)
    model.minIPUSyncDelay = 0
    model.relativeSyncDelay = SyncDelayType.NO_DELAY
    return model.createDevice()


@dataclass
class Tut7Result:
    """What :func:`run` returns."""

    best: SplitCost
    worst: int
    result: np.ndarray
    expected: np.ndarray
    ok: bool
    engine: Engine


def print_split(best: SplitCost, worst: int) -> None:
    """Print the chosen split and the worst cost the search saw, as the tutorial does."""
    print("Best split chosen:")
    print(best.describe())
    print(f"Worst cost seen: {worst}", flush=True)


def connect_streams(
    engine: Engine, matrix: np.ndarray, vector: np.ndarray, result: np.ndarray
) -> None:
    """Connect the program's streams: the host's matrix and vector in, ``result`` out."""
    engine.connectStream("inputVector", vector)
    engine.connectStream("inputMatrix", matrix.reshape(-1))
    engine.connectStream("out", result)


def run(device: Device, rows: int, cols: int, profile: bool = True) -> Tut7Result:
    """Choose the split, build and run the product on ``device`` and check it.

    Prints the chosen split, the worst cost, the check's verdict and (when
    ``profile`` and the device is an IPU Model) the profile summary.
    """
    target = device.getTarget()
    best, worst = choose_split_for(target, rows, cols)
    print_split(best, worst)

    matrix, vector = host_data(rows, cols)
    graph = Graph(target)
    built = build(graph, rows, cols, best.split)
    engine = Engine(graph, built.program)
    engine.load(device)
    result = np.zeros(rows, np.float32)
    connect_streams(engine, matrix, vector, result)
    engine.run(0)

    expected = host_product(matrix, vector)
    ok = check_product(result, expected)
    if profile and device.isIPUModel:
        engine.printProfileSummary(sys.stdout, {"showExecutionSteps": "true"})
    return Tut7Result(best, worst, result, expected, ok, engine)


def check_product(result: np.ndarray, expected: np.ndarray) -> bool:
    """Print whether the device's product matches the host's (to RELATIVE_TOLERANCE per
    row), naming the worst row when it does not; return whether it does."""
    errors = relative_errors(result, expected)
    ok = bool((errors <= RELATIVE_TOLERANCE).all())
    if ok:
        print("Multiplication result OK")
    else:
        worst_row = int(np.argmax(errors))
        print(
            f"Multiplication result incorrect: {(errors > RELATIVE_TOLERANCE).sum()} of "
            f"{result.size} rows exceed relative error {RELATIVE_TOLERANCE:g}; worst is row "
            f"{worst_row}: device {float(result[worst_row])!r}, host "
            f"{float(expected[worst_row])!r} (relative error {errors[worst_row]:.3g})"
        )
    return ok


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def workload(device: Device, rows: int = DEFAULT_ROWS, cols: int = DEFAULT_COLS) -> Workload:
    """The optimised product as a workload (``ipusim run examples/tutorials/tut7.py
    -p rows=10000 -p cols=1000``); prints the chosen split.

    The device is used as given: for the tutorial's IPU Model settings add
    ``--set sync.min_sync_delay_cycles=0 --set sync.relative_delay=none``. The check
    accepts a relative error up to :data:`RELATIVE_TOLERANCE` against float64.
    """
    best, worst = choose_split_for(device.getTarget(), rows, cols)
    print_split(best, worst)
    matrix, vector = host_data(rows, cols)
    result = np.zeros(rows, np.float32)
    graph = Graph(device.getTarget())
    built = build(graph, rows, cols, best.split)

    def prepare(engine: Engine) -> None:
        connect_streams(engine, matrix, vector, result)

    def check(engine: Engine) -> bool:
        expected = host_product(matrix, vector)
        return bool((relative_errors(result, expected) <= RELATIVE_TOLERANCE).all())

    return Workload(graph, built.program, prepare=prepare, check=check)


def parse_arguments(description: str, argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line ``[--device model-ipu1|model-ipu2] [ROWS COLS]`` (and the hidden
    ``--cpu``); exits with a usage error when there are fewer than 2 columns to split."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--device", choices=sorted(DEVICES), default=DEFAULT_DEVICE, help="IPU Model to run on"
    )
    parser.add_argument("rows", nargs="?", type=positive_int, default=DEFAULT_ROWS)
    parser.add_argument("cols", nargs="?", type=positive_int, default=DEFAULT_COLS)
    parser.add_argument("--cpu", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.cols < 2:
        parser.error(f"cols must be at least 2 to split the columns, got {args.cols}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns 0 when the result is correct, else 1."""
    args = parse_arguments(__doc__.splitlines()[0], argv)
    device = create_device(args.device, cpu=args.cpu)
    outcome = run(device, args.rows, args.cols)
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
