"""A device-side while loop: ``RepeatWhileTrue`` with a PopLibs ``allTrue`` predicate.

Port of ``allTrueTest`` in ``tests/popops/StdOperatorsTest.cpp`` of the public
``graphcore/poplibs`` repository. An INT vector ``in`` (two elements, on tile 0) is
decremented by one (``subInPlace``) while all its elements are non-zero: the
condition program computes ``neq(in, 0)`` and reduces it with ``allTrue`` to the
loop's predicate, and ``RepeatWhileTrue(condProg, predicate, bodyProg)`` runs the
condition before each iteration. From ``{10, 8}`` the loop stops when the second
element reaches 0, so eight iterations leave ``{2, 0}``.

The original is a test: it checks ``output[0] == 2`` and ``output[1] == 0`` and prints
nothing. This port prints the values it reads back, ``output: {2,0}``, and exits with
status 1 if they are not the ones the original checks. ``--init A B`` starts from
other values (the result is then ``{A - k, B - k}`` with ``k = min(A, B)`` for
non-negative starts).

Run::

    python examples/poplar/repeat_while_true.py
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np

from poplar_api import INT, Engine, Graph, IPUModel, popops
from poplar_api.program import RepeatWhileTrue
from poplar_api.program import Sequence as ProgSequence

#: Elements of the loop's vector.
SIZE = 2
#: The original's start values and the values it checks after the loop.
INIT = (10, 8)
EXPECTED = (2, 0)


def run(init: Sequence[int] = INIT) -> np.ndarray:
    """Build the loop, run it from ``init`` on an IPU Model and return ``in`` after it."""
    device = IPUModel().createDevice()
    graph = Graph(device.getTarget())
    popops.addCodelets(graph)

    in_ = graph.addVariable(INT, [SIZE], "t1")
    ones = graph.addConstant(INT, [SIZE], 1)
    zeros = graph.addConstant(INT, [SIZE], 0)
    graph.setTileMapping(ones, 0)
    graph.setTileMapping(zeros, 0)
    graph.setTileMapping(in_, 0)

    bodyProg = ProgSequence()
    popops.subInPlace(graph, in_, ones, bodyProg)

    condProg = ProgSequence()
    neZero = popops.neq(graph, in_, zeros, condProg)
    predicate = popops.allTrue(graph, neZero, condProg, "all_true")

    mainProg = ProgSequence()
    mainProg.add(RepeatWhileTrue(condProg, predicate, bodyProg))
    graph.createHostWrite("in", in_)
    graph.createHostRead("out", in_)

    eng = Engine(graph, mainProg)
    eng.load(device)
    eng.writeTensor("in", np.asarray(init, np.int32))
    eng.run()
    output = np.zeros(SIZE, np.int32)
    eng.readTensor("out", output)
    return output


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--init", type=int, nargs=SIZE, default=list(INIT), metavar=("A", "B"),
        help="start values of the vector (default: 10 8)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    output = run(args.init)
    print("output: {" + ",".join(str(int(v)) for v in output) + "}")
    if tuple(args.init) == INIT and tuple(int(v) for v in output) != EXPECTED:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
