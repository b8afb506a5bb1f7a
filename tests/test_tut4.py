"""Tutorial 4 (profiling two chained matMuls), run as a user runs it."""

from __future__ import annotations

import io
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from examples_common import load_example

from poplar_api import Engine, Graph, IPUModel
from poplar_api.errors import OutOfMemoryError

TUT4 = Path(__file__).resolve().parents[1] / "examples" / "tutorials" / "tut4.py"


#: Address-space cap for the oversized run (it needs about 11 GiB resident), so a
#: host-memory regression fails with a MemoryError instead of exhausting the machine.
OOM_RUN_ADDRESS_SPACE = 18 << 30


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (OOM_RUN_ADDRESS_SPACE, OOM_RUN_ADDRESS_SPACE))


def run_tut4(*args: str, timeout: float = 900, cap: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(TUT4), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        preexec_fn=_cap_memory if cap else None,
    )


def test_tut4_runs_and_profiles_the_matmuls():
    proc = run_tut4()
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = proc.stdout
    lines = out.splitlines()
    assert lines[0] == "Program complete"
    assert "Memory Usage:" in out and "Execution:" in out
    # the execution steps list both products' compute sets, in program order
    steps = [ln.split()[-1] for ln in lines if ln.strip().split(" ")[0].isdigit()]
    names = ("m4/Convolve", "m4/Reduce", "m5/Convolve", "m5/Reduce")
    matmul_steps = [s for s in steps if s in names]
    assert matmul_steps[0] == "m4/Convolve"
    assert "m5/Convolve" in matmul_steps
    assert matmul_steps.index("m5/Convolve") > matmul_steps.index("m4/Convolve")
    # the products run on Poplibs' AMP vertex, named as a Poplar profile names it
    assert "poplin::ConvPartial1x1Out<float,float,true,true,16,2,false>" in out


def test_oversized_products_do_not_fit_and_allow_out_of_memory_still_reports():
    # tut4's graph scaled to the 8-tile, 64 KiB tiny machine: m1 alone is
    # 400 * 300 * 4 B = 480,000 B, more than the 8 * 65,536 = 524,288 B of all tiles
    # once the received operand blocks are added, so compiling must fail.
    tut4 = load_example("tutorials/tut4.py")
    shapes = {"m1": (400, 300), "m2": (300, 30), "m3": (30, 20)}
    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    seq, _ = tut4.build(graph, shapes)
    with pytest.raises(OutOfMemoryError, match=r"tile \d+: needs") as info:
        Engine(graph, seq)
    assert info.value.report is not None
    engine = Engine(graph, seq, {"debug.allowOutOfMemory": "true"})
    engine.load(device)
    engine.run(0)
    out = io.StringIO()
    engine.printProfileSummary(out, {"showExecutionSteps": "true"})
    text = out.getvalue()  # m4 may run as a serial loop (m4/serial/Convolve)
    assert "Memory Usage:" in text and re.search(r"m4/(serial/)?Convolve", text)


@pytest.mark.slow
def test_tut4_oversized_variant_is_out_of_memory():
    proc = run_tut4("--oom", cap=True)
    assert proc.returncode != 0
    err = proc.stderr.lower()
    assert "out of memory" in err or "outofmemory" in err
    assert "tile" in err  # names the worst tiles
