"""Tutorial 7 on two IPUs: the matrix-vector product with its rows split across IPUs.

The product of ``examples/tutorials/tut7.py`` (one dot-product vertex per row segment,
then one reduce vertex per row), on a target of two IPUs: IPU 0 computes the first
half of the rows, IPU 1 the second half, each on its own tiles (a virtual graph per
IPU) with the column split tut7's cost model picks for half the rows on one IPU.
The host streams the vector ``x`` to IPU 0; a ``Copy`` sends it to IPU 1 over the
IPU-Links (a global exchange); the matrix rows are streamed to the IPU that owns them.
Both IPUs then run the two compute sets at the same time. The host checks the result
against a float64 product and the profile summary (with its per-IPU split) is printed.

Run::

    python examples/multi_ipu/tut7_two_ipus.py [--device model-ipu1|model-ipu2] [ROWS COLS]
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

from poplar_api import FLOAT, Device, Engine, Graph, IPUModel, SyncDelayType
from poplar_api import program as prog
from poplar_api.errors import GraphError


def _tut7() -> ModuleType:
    """``examples/tutorials/tut7.py`` (its vertices, cost model and host check)."""
    name = "tut7_for_two_ipus"
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).resolve().parents[1] / "tutorials" / "tut7.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


tut7 = _tut7()

#: IPUs the rows are split over.
NUM_IPUS = 2
DEFAULT_ROWS = tut7.DEFAULT_ROWS
DEFAULT_COLS = tut7.DEFAULT_COLS
DEVICES = tut7.DEVICES
DEFAULT_DEVICE = tut7.DEFAULT_DEVICE
RELATIVE_TOLERANCE = tut7.RELATIVE_TOLERANCE


def row_ranges(rows: int, num_ipus: int = NUM_IPUS) -> list[tuple[int, int]]:
    """Rows ``[lo, hi)`` of each IPU: ``rows`` cut into ``num_ipus`` near-equal parts."""
    return [(i * rows // num_ipus, (i + 1) * rows // num_ipus) for i in range(num_ipus)]


@dataclass
class TwoIPUGraph:
    """What :func:`build` made: the graph, its program and the tensors."""

    graph: Graph
    program: prog.Sequence
    matrix: object
    input_vectors: list
    output_vector: object


def build(graph: Graph, rows: int, cols: int, split: int) -> TwoIPUGraph:
    """Tensors, streams, the ``mulCS`` and ``reduceCS`` compute sets and the program.

    IPU ``i`` (virtual graph over its tiles, ``T`` tiles) holds rows ``[lo, hi)``
    (:func:`row_ranges`) laid out as tut7 lays out a matrix of ``n = hi - lo`` rows
    on one IPU: its copy of the input vector (``inputVector<i>``, element ``c`` on its
    tile ``c*T // cols``), and the matrix pieces, partials, outputs and vertices of its
    rows as ``tut7.add_row_vertices`` lays them out (segment ``s`` of local row ``r``
    on its tile ``(s*n + r)*T // (split*n)``, the reduce of local row ``r`` on its tile
    ``r*T // n``). One compute set holds the vertices of both IPUs, so they run at the
    same time.
    """
    graph.addCodelets([tut7.DotProductVertex, tut7.ReduceVertex])
    tiles_per_ipu = graph.getTarget().getTilesPerIPU()
    if graph.getTarget().getNumIPUs() < NUM_IPUS:
        raise GraphError(
            f"tut7_two_ipus: the target has {graph.getTarget().getNumIPUs()} IPU(s); "
            f"it needs {NUM_IPUS}; hint: IPUModel(...).numIPUs = {NUM_IPUS}"
        )
    matrix = graph.addVariable(FLOAT, [rows, cols], "matrix")
    output_vector = graph.addVariable(FLOAT, [rows], "outputVector")
    partials = graph.addVariable(FLOAT, [rows, split], "partials")
    mul_cs = graph.addComputeSet("mulCS")
    reduce_cs = graph.addComputeSet("reduceCS")
    inputs = []
    for ipu, (lo, hi) in enumerate(row_ranges(rows)):
        sub = graph.createVirtualGraph(ipu * tiles_per_ipu, (ipu + 1) * tiles_per_ipu)
        x = sub.addVariable(FLOAT, [cols], f"inputVector{ipu}")
        for c in range(cols):
            sub.setTileMapping(x[c], c * tiles_per_ipu // cols)
        inputs.append(x)
        tut7.add_row_vertices(
            sub,
            mul_cs,
            reduce_cs,
            x,
            [matrix[r] for r in range(lo, hi)],
            [partials[r] for r in range(lo, hi)],
            [output_vector[r] for r in range(lo, hi)],
            split,
        )

    in_stream = graph.addHostToDeviceFIFO("inputVector", FLOAT, cols)
    matrix_stream = graph.addHostToDeviceFIFO("inputMatrix", FLOAT, rows * cols)
    out_stream = graph.addDeviceToHostFIFO("out", FLOAT, rows)
    program = prog.Sequence(
        [
            prog.Copy(in_stream, inputs[0]),
            # x to the other IPU(s) over the IPU-Links: a global exchange
            *(prog.Copy(inputs[0], x, f"x to IPU {i}") for i, x in enumerate(inputs) if i > 0),
            prog.Copy(matrix_stream, matrix),
            prog.Sequence(prog.Execute(mul_cs), prog.Execute(reduce_cs)),
            prog.Copy(output_vector, out_stream),
        ]
    )  # fmt: skip
    return TwoIPUGraph(graph, program, matrix, inputs, output_vector)


def create_device(device: str | IPUModel = DEFAULT_DEVICE, cpu: bool = False) -> Device:
    """A device of two IPUs.

    Parameters
    ----------
    device
        ``"model-ipu1"`` or ``"model-ipu2"``, or an :class:`IPUModel` to use as given
        (its ``numIPUs`` is set to 2 and the tutorial's sync settings are applied).
    cpu
        Run on a CPU device with two IPUs of that version instead (values only).
    """
    if isinstance(device, IPUModel):
        model = device
    else:
        if device not in DEVICES:
            raise GraphError(
                f"tut7_two_ipus: unknown device {device!r}; choose one of {', '.join(DEVICES)}"
            )
        model = IPUModel(DEVICES[device])
    model.numIPUs = NUM_IPUS
    if cpu:
        return Device.createCPUDevice(model.createDevice().getTarget().config)
    model.minIPUSyncDelay = 0
    model.relativeSyncDelay = SyncDelayType.NO_DELAY
    return model.createDevice()


#: What :func:`run` returns: tutorial 7's result record.
Result = tut7.Tut7Result


def run(device: Device, rows: int, cols: int, profile: bool = True) -> Result:
    """Choose the split, build and run the product on ``device`` (two IPUs), check it.

    Prints the chosen split, the worst cost and the check's verdict as tut7 does,
    then (``profile`` and an IPU Model) the profile summary.
    """
    target = device.getTarget()
    half = max(hi - lo for lo, hi in row_ranges(rows))
    best, worst = tut7.choose_split(
        half, cols, target.getTilesPerIPU(), target.getNumWorkerContexts(),
        target.getExchangeBytesPerCycle(),
    )  # fmt: skip
    tut7.print_split(best, worst)

    matrix, vector = tut7.host_data(rows, cols)
    graph = Graph(target)
    built = build(graph, rows, cols, best.split)
    engine = Engine(graph, built.program)
    engine.load(device)
    result = np.zeros(rows, np.float32)
    tut7.connect_streams(engine, matrix, vector, result)
    engine.run(0)

    expected = matrix.astype(np.float64) @ vector.astype(np.float64)
    ok = tut7.check_product(result, expected)
    if profile and device.isIPUModel:
        engine.printProfileSummary(sys.stdout)
    return Result(best, worst, result, expected, ok, engine)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns 0 when the result is correct, else 1."""
    args = tut7.parse_arguments(__doc__.splitlines()[0], argv)
    device = create_device(args.device, cpu=args.cpu)
    outcome = run(device, args.rows, args.cols)
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
