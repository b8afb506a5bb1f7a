"""Tutorial 6: matrix-vector multiplication, one dot-product vertex per row.

The host streams a ``ROWS x COLS`` matrix (``matrix[r][c] = r*c``) and a vector
(``in[c] = c``) to the device, one compute set multiplies them, and the result is
streamed back and compared, exactly, with the same float32 sums done on the host.

Run::

    python examples/tutorials/tut6.py [ROWS COLS]     # default 40 50
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from poplar_api import FLOAT, Device, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.codelet import Input, Output, Vector, Vertex
from poplar_api.workload import Workload

DEFAULT_ROWS = 40
DEFAULT_COLS = 50


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


def dot_product_cycles(length: int) -> int:
    """Cycle estimate of a DotProductVertex over ``length`` elements (two per cycle)."""
    return 5 + (length + 1) // 2


def host_data(rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """The tutorial's inputs: ``matrix[r][c] = r*c`` (float32, rows x cols), ``in[c] = c``."""
    vector = np.arange(cols, dtype=np.float32)
    matrix = np.outer(np.arange(rows, dtype=np.float32), vector).astype(np.float32)
    return matrix, vector


def host_matvec_in_order(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """``matrix @ vector`` with float32 products summed column by column, from zero.

    Each row's sum follows the order the vertex uses, so the device result must match
    bit for bit. The loop runs over columns; each step is one vectorised float32
    multiply-add over all rows.
    """
    matrix = np.asarray(matrix, np.float32)
    vector = np.asarray(vector, np.float32)
    acc = np.zeros(matrix.shape[0], np.float32)
    for c in range(matrix.shape[1]):
        acc += matrix[:, c] * vector[c]
    return acc


@dataclass
class MatVecGraph:
    """What :func:`build` made: the graph, its program and the tensors."""

    graph: Graph
    program: prog.Sequence
    matrix: object
    input_vector: object
    output_vector: object


def build(graph: Graph, rows: int, cols: int) -> MatVecGraph:
    """Add tensors, streams and the ``mulCS`` compute set for a rows x cols product.

    Row ``r`` of the matrix, its output element and its vertex live on tile
    ``r * T // rows``; element ``c`` of the input vector on tile ``c * T // cols``
    (``T`` tiles). The program copies the vector and the matrix in from their
    streams, executes ``mulCS`` and copies the result out to the ``"out"`` stream.
    """
    graph.addCodelets(DotProductVertex)
    tiles = graph.getTarget().getNumTiles()
    matrix = graph.addVariable(FLOAT, [rows, cols], "matrix")
    input_vector = graph.addVariable(FLOAT, [cols], "inputVector")
    output_vector = graph.addVariable(FLOAT, [rows], "outputVector")
    for c in range(cols):
        graph.setTileMapping(input_vector[c], c * tiles // cols)

    mul_cs = graph.addComputeSet("mulCS")
    cycles = dot_product_cycles(cols)
    for r in range(rows):
        tile = r * tiles // rows
        row, out_r = matrix[r], output_vector[r]
        graph.setTileMapping(row, tile)
        graph.setTileMapping(out_r, tile)
        vertex = graph.addVertex(
            mul_cs, "DotProductVertex", {"a": row, "b": input_vector, "out": out_r}
        )
        graph.setTileMapping(vertex, tile)
        graph.setPerfEstimate(vertex, cycles)

    in_stream = graph.addHostToDeviceFIFO("inputVector", FLOAT, cols)
    matrix_stream = graph.addHostToDeviceFIFO("inputMatrix", FLOAT, rows * cols)
    out_stream = graph.addDeviceToHostFIFO("out", FLOAT, rows)
    program = prog.Sequence(
        [
            prog.Copy(in_stream, input_vector),
            prog.Copy(matrix_stream, matrix),
            prog.Execute(mul_cs),
            prog.Copy(output_vector, out_stream),
        ]
    )
    return MatVecGraph(graph, program, matrix, input_vector, output_vector)


def run(device: Device, rows: int, cols: int) -> tuple[np.ndarray, bool, Engine]:
    """Build, run and check the product on ``device``, printing the tutorial's lines.

    Returns
    -------
    result, ok, engine
        The device's output vector, whether it equals the host's in-order float32
        sums exactly, and the engine.
    """
    print(f"Multiplying matrix of size {rows}x{cols} by vector of size {cols}")
    matrix, vector = host_data(rows, cols)
    result = np.zeros(rows, np.float32)

    print("Creating environment (compiling vertex programs)")
    graph = Graph(device.getTarget())

    print("Constructing compute graph and control program")
    built = build(graph, rows, cols)

    print("Running graph program to multiply matrix by vector")
    engine = Engine(graph, built.program)
    engine.load(device)
    engine.connectStream("inputVector", vector)
    engine.connectStream("inputMatrix", matrix.reshape(-1))
    engine.connectStream("out", result)
    engine.run(0)

    expected = host_matvec_in_order(matrix, vector)
    ok = bool(np.array_equal(result, expected))
    if ok:
        print("Multiplication result OK")
    else:
        bad = np.flatnonzero(result != expected)
        r = int(bad[0])
        print(
            f"Multiplication result incorrect: {bad.size} of {rows} rows differ; "
            f"first is row {r}: device {result[r]!r}, host {expected[r]!r}"
        )
    return result, ok, engine


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
    """The product as a workload; the check compares with the host's in-order sums."""
    matrix, vector = host_data(rows, cols)
    result = np.zeros(rows, np.float32)
    graph = Graph(device.getTarget())
    built = build(graph, rows, cols)

    def prepare(engine: Engine) -> None:
        engine.connectStream("inputVector", vector)
        engine.connectStream("inputMatrix", matrix.reshape(-1))
        engine.connectStream("out", result)

    def check(engine: Engine) -> bool:
        return bool(np.array_equal(result, host_matvec_in_order(matrix, vector)))

    return Workload(graph, built.program, prepare=prepare, check=check)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns 0 when the result is correct, else 1."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", nargs="?", type=positive_int, default=DEFAULT_ROWS)
    parser.add_argument("cols", nargs="?", type=positive_int, default=DEFAULT_COLS)
    parser.add_argument("--cpu", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    device = Device.createCPUDevice("ipu2") if args.cpu else IPUModel("ipu2").createDevice()
    _, ok, _ = run(device, args.rows, args.cols)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
