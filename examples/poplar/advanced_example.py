"""Advanced features: several programs, PopLibs, and saving/loading the executable.

Port of ``tutorials/feature_examples/poplar/advanced_example`` (``main.cpp``,
``utils.h``, ``codelets.cpp``) of the public ``graphcore/examples`` repository (Poplar
SDK 3.4). The graph adds two 4-element vectors twice: once with a custom vertex
(``VectorAdd``, in ``advanced_example_codelets.py``, loaded by file name as the
original loads its codelets file) and once with a PopLibs reduction
(``popops.reduceWithOutput`` over the two vectors concatenated as columns, its compute
sets collected in a list). The I/O is in programs of its own, so the engine runs four
programs by index: ``WRITE_INPUTS``, ``CUSTOM_PROG``, ``REDUCTION_PROG`` and
``READ_RESULTS``. The programs are compiled with ``compileGraph``; ``--save-exe``
writes the executable to ``<exe-name>.poplar`` and ``--load-exe`` reads it back
without building the graph or the programs. ``--profile`` writes the profile summary
with the execution steps to ``--profile-name``.

Printed lines (to stderr, as the original): ``Using IPU model`` with ``--model``,
else ``Using HW device ID: <id>`` (the id of the first free device of the simulated
IPU system, 0 on an idle one, as on an idle IPU server); then ``Results match.``.
Errors print ``Exception: <message>`` and exit with status 1, as the original.

Run::

    python examples/poplar/advanced_example.py --model
    python examples/poplar/advanced_example.py --model --save-exe --exe-name /tmp/example
    python examples/poplar/advanced_example.py --model --load-exe --exe-name /tmp/example
"""

from __future__ import annotations

import argparse
import enum
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from poplar_api import (
    FLOAT,
    Device,
    Engine,
    Executable,
    Graph,
    IPUModel,
    compileGraph,
    concat,
    popops,
)
from poplar_api import program as prog

sys.path.insert(0, str(Path(__file__).resolve().parent))

from poplar_common import getIpuHwDevice

#: The codelet file (the original's ``codelets.cpp``).
CODELETS = Path(__file__).resolve().with_name("advanced_example_codelets.py")


class Progs(enum.IntEnum):
    """Indices of the engine's programs."""

    WRITE_INPUTS = 0
    CUSTOM_PROG = 1
    REDUCTION_PROG = 2
    READ_RESULTS = 3
    NUM_PROGRAMS = 4


@dataclass
class Options:
    """The command-line options of the original's ``utils::Options``."""

    numIpus: int = 1
    exeName: str = ""
    profileName: str = "profile.txt"
    useIpuModel: bool = False
    saveExe: bool = False
    loadExe: bool = False
    profile: bool = False


def parseOptions(argv: Sequence[str] | None) -> Options:
    """Parse and check the command line.

    Raises
    ------
    ValueError
        Saving or loading without ``--exe-name``, or profiling a loaded executable.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", action="store_true", help="If set then use IPU model instead of hardware."
    )
    parser.add_argument("--ipus", type=int, default=1, help="Number of IPUs to use.")
    parser.add_argument(
        "--exe-name",
        default="",
        help="Save the graph executable under a file name with this prefix. This option "
        "is required when loading/saving executables.",
    )
    parser.add_argument(
        "--save-exe",
        action="store_true",
        help="Save the Poplar graph executable after compilation. You must also set 'exe-name'.",
    )
    parser.add_argument(
        "--load-exe",
        action="store_true",
        help="Load a previously saved executable and skip graph and program "
        "construction. You must also set 'exe-name'.",
    )
    parser.add_argument("--profile", action="store_true", help="Enable profile output.")
    parser.add_argument(
        "--profile-name", default="profile.txt", help="Name of profile output file."
    )
    args = parser.parse_args(argv)
    options = Options(
        numIpus=args.ipus,
        exeName=args.exe_name,
        profileName=args.profile_name,
        useIpuModel=args.model,
        saveExe=args.save_exe,
        loadExe=args.load_exe,
        profile=args.profile,
    )
    if (options.saveExe or options.loadExe) and not options.exeName:
        raise ValueError("To save/load an executable you must set 'exe-name'")
    if options.loadExe and options.profile:
        raise ValueError("It is not possible to run profiling on a loaded executable.")
    return options


def getExeFileName(options: Options) -> str:
    """The executable's file: ``<exe-name>.poplar``."""
    return options.exeName + ".poplar"


def buildGraphAndPrograms(g: Graph, options: Options) -> list[prog.Program]:
    """Add the variables, vertices, streams and reduction to ``g``; return the programs,
    indexed by :class:`Progs`."""
    # Three 4-element vectors, each on a tile of its own.
    v1 = g.addVariable(FLOAT, [4], "a")
    v2 = g.addVariable(FLOAT, [4], "b")
    v3 = g.addVariable(FLOAT, [4], "c")
    g.setTileMapping(v1, 0)
    g.setTileMapping(v2, 1)
    g.setTileMapping(v3, 2)

    # The custom vertex, on tile 0; the exchange brings its operands there.
    cs1 = g.addComputeSet("cs1")
    g.addCodelets(str(CODELETS))
    v = g.addVertex(cs1, "VectorAdd")
    g.setTileMapping(v, 0)
    g.connect(v["x"], v1)
    g.connect(v["y"], v2)
    g.connect(v["z"], v3)
    # A custom vertex needs a cycle estimate on the IPU Model. The original sets it
    # only with --model (hardware measures the vertex); ipusim simulates hardware
    # devices too, so it is set for both.
    g.setPerfEstimate(v, 20)

    # Streams that write and read the variables.
    stream1 = g.addHostToDeviceFIFO("write_x", FLOAT, v1.numElements())
    stream2 = g.addHostToDeviceFIFO("write_y", FLOAT, v2.numElements())
    stream3 = g.addHostToDeviceFIFO("write_z", FLOAT, v3.numElements())
    stream4 = g.addDeviceToHostFIFO("read_z", FLOAT, v3.numElements())

    # The same sum with PopLibs: reduce the columns of [a b] into c.
    popops.addCodelets(g)
    reductionSets: list = []
    tc = concat(v1.reshape([v1.numElements(), 1]), v2.reshape([v2.numElements(), 1]), 1)
    reduce = popops.ReduceParams(popops.Operation.ADD)
    popops.reduceWithOutput(g, tc, v3, [1], reduce, reductionSets, "reduction")

    progs: list[prog.Program] = [prog.Sequence() for _ in range(Progs.NUM_PROGRAMS)]
    progs[Progs.WRITE_INPUTS] = prog.Sequence(
        prog.Copy(stream1, v1), prog.Copy(stream2, v2), prog.Copy(stream3, v3)
    )
    progs[Progs.CUSTOM_PROG] = prog.Execute(cs1)
    seq = prog.Sequence()
    for cs in reductionSets:
        seq.add(prog.Execute(cs))
    progs[Progs.REDUCTION_PROG] = seq
    progs[Progs.READ_RESULTS] = prog.Copy(v3, stream4)
    return progs


def executeGraphProgram(device: Device, exe: Executable, options: Options) -> None:
    """Run the programs of ``exe`` on ``device``; both ways must give the same sums.

    Raises
    ------
    RuntimeError
        The two results differ.
    """
    engine = Engine(exe)
    engine.load(device)

    x = np.array([1, 2, 3, 4], np.float32)
    y = np.array([4, 3, 2, 1], np.float32)
    zInit = np.array([-1, -1, -1, -1], np.float32)
    zResult1 = np.zeros(4, np.float32)
    zResult2 = np.zeros(4, np.float32)
    engine.connectStream("write_x", x)
    engine.connectStream("write_y", y)
    engine.connectStream("write_z", zInit)

    # With the custom vertex.
    engine.connectStream("read_z", zResult1)
    engine.run(Progs.WRITE_INPUTS)
    engine.run(Progs.CUSTOM_PROG)
    engine.run(Progs.READ_RESULTS)

    # With the PopLibs reduction.
    engine.connectStream("read_z", zResult2)
    engine.run(Progs.WRITE_INPUTS)
    engine.run(Progs.REDUCTION_PROG)
    engine.run(Progs.READ_RESULTS)

    if not np.array_equal(zResult1, zResult2):
        raise RuntimeError("Results do not match")
    print("Results match.", file=sys.stderr)

    if options.profile:
        with open(options.profileName, "w") as of:
            engine.printProfileSummary(of, {"showExecutionSteps": "true"})


def compileOrLoadExe(graph: Graph, progs: list[prog.Program], options: Options) -> Executable:
    """Load ``<exe-name>.poplar`` with ``--load-exe``, else compile ``progs``."""
    if options.loadExe:
        exeName = getExeFileName(options)
        try:
            with open(exeName, "rb") as inf:
                return Executable.deserialize(inf)
        except Exception:
            print(f"Error: Failed to load executable '{exeName}'", file=sys.stderr)
            raise
    return compileGraph(graph, progs)


def getIpuModelDevice(numIpus: int) -> Device:
    """An IPU Model device of ``numIpus`` IPUs."""
    ipuModel = IPUModel()
    ipuModel.numIPUs = numIpus
    return ipuModel.createDevice()


def getDeviceFromOptions(options: Options) -> Device:
    """The IPU Model (``--model``) or a hardware device; says which on stderr."""
    if options.useIpuModel:
        device = getIpuModelDevice(options.numIpus)
        print("Using IPU model", file=sys.stderr)
    else:
        device = getIpuHwDevice(options.numIpus)
        print(f"Using HW device ID: {device.getId()}", file=sys.stderr)
    return device


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the process exit code."""
    try:
        options = parseOptions(argv)
        device = getDeviceFromOptions(options)
        graph = Graph(device.getTarget())

        # A loaded executable needs no graph or programs.
        progs: list[prog.Program] = []
        if not options.loadExe:
            progs = buildGraphAndPrograms(graph, options)

        exe = compileOrLoadExe(graph, progs, options)

        if options.saveExe and not options.loadExe:
            with open(getExeFileName(options), "wb") as outf:
                exe.serialize(outf)

        executeGraphProgram(device, exe, options)
    except Exception as e:
        print(f"Exception: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
