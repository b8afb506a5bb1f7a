"""Tutorial 1: variables, tile mappings, copies, host read/write handles and streams.

Builds four variables, fills them by copying a constant, slicing and streaming from
the host, prints them with ``PrintTensor`` while the program runs, then reads one of
them back to the host and prints it.

Run::

    python examples/tutorials/tut1.py
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np

from poplar_api import FLOAT, INT, Device, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.workload import Workload

#: Values of the constant ``c1`` copied into ``v1``.
C1_VALUES = [1.0, 1.5, 2.0, 2.5]
#: Elements the host→device stream delivers per copy.
STREAM_ELEMENTS = 10
#: Size of the host's circular buffer behind the stream.
HOST_BUFFER_ELEMENTS = 30


def build(graph: Graph) -> prog.Sequence:
    """Add the tutorial's tensors, handles and stream to ``graph``; return its program.

    ``v1`` lives on tile 0, element ``i`` of ``v2`` on tile ``i``; ``v3``, ``v4`` and
    the constant ``c1`` on tile 0. The program copies ``c1`` into ``v1`` and ``v1`` into
    ``v2``, copies three elements of ``v1`` into row 1 of ``v3`` and fills ``v4`` twice
    from the host stream, printing each step.
    """
    v1 = graph.addVariable(FLOAT, [4], "v1")
    v2 = graph.addVariable(FLOAT, [4], "v2")
    v3 = graph.addVariable(FLOAT, [4, 4], "v3")
    v4 = graph.addVariable(INT, [STREAM_ELEMENTS], "v4")
    graph.setTileMapping(v1, 0)
    for i in range(4):
        graph.setTileMapping(v2[i], i)
    graph.setTileMapping(v3, 0)
    graph.setTileMapping(v4, 0)

    c1 = graph.addConstant(FLOAT, [4], C1_VALUES, "c1")
    graph.setTileMapping(c1, 0)

    graph.createHostWrite("v3-write", v3)
    graph.createHostRead("v3-read", v3)
    in_stream = graph.addHostToDeviceFIFO("v4-input-stream", INT, STREAM_ELEMENTS)

    seq = prog.Sequence()
    seq.add(prog.Copy(c1, v1))
    seq.add(prog.PrintTensor("v1-debug", v1))
    seq.add(prog.Copy(v1, v2))
    seq.add(prog.PrintTensor("v2-debug", v2))
    # Elements 0..2 of v1 go to row 1, columns 1..3 of v3.
    seq.add(prog.Copy(v1.slice(0, 3), v3.slice([1, 1], [2, 4])))
    seq.add(prog.Copy(in_stream, v4))
    seq.add(prog.PrintTensor("v4-0", v4))
    seq.add(prog.Copy(in_stream, v4))
    seq.add(prog.PrintTensor("v4-1", v4))
    return seq


def format_row(values: np.ndarray) -> str:
    """One host row as the tutorial prints it: two spaces, then each value and a space."""
    return "  " + "".join(f"{float(x):g} " for x in values)


def run(device: Device) -> tuple[np.ndarray, Engine]:
    """Build, load and run the tutorial on ``device``, printing as the tutorial does.

    Returns
    -------
    h3, engine
        ``v3`` as read back by the host (16 floats, row-major) and the engine.
    """
    graph = Graph(device.getTarget())
    seq = build(graph)
    engine = Engine(graph, seq)
    engine.load(device)

    engine.writeTensor("v3-write", np.zeros(16, np.float32))
    host_buffer = np.arange(HOST_BUFFER_ELEMENTS, dtype=np.int32)
    engine.connectStream("v4-input-stream", host_buffer)

    print("Running program", flush=True)
    engine.run(0)
    print("Program complete")

    h3 = np.zeros(16, np.float32)
    engine.readTensor("v3-read", h3)
    print("h3 data:")
    for row in h3.reshape(4, 4):
        print(format_row(row))
    return h3, engine


def workload(device: Device) -> Workload:
    """The tutorial as a workload (``ipusim run examples/tutorials/tut1.py``).

    Same graph and program as :func:`run`; the check reads ``v3`` back and compares it
    with what the copies must leave there: zeros except row 1, columns 1..3 = ``c1[:3]``.
    """
    graph = Graph(device.getTarget())
    seq = build(graph)
    host_buffer = np.arange(HOST_BUFFER_ELEMENTS, dtype=np.int32)

    def prepare(engine: Engine) -> None:
        engine.writeTensor("v3-write", np.zeros(16, np.float32))
        engine.connectStream("v4-input-stream", host_buffer)

    def check(engine: Engine) -> bool:
        expected = np.zeros((4, 4), np.float32)
        expected[1, 1:4] = C1_VALUES[:3]
        return bool(np.array_equal(engine.readTensor("v3-read"), expected))

    return Workload(graph, seq, prepare=prepare, check=check)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    device = Device.createCPUDevice("ipu2") if args.cpu else IPUModel("ipu2").createDevice()
    run(device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
