"""Tutorial 4 (profiling two chained matMuls), run as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TUT4 = Path(__file__).resolve().parents[1] / "examples" / "tutorials" / "tut4.py"


def run_tut4(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(TUT4), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
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
    matmul_steps = [s for s in steps if s in ("m4/MatMul", "m4/Reduce", "m5/MatMul", "m5/Reduce")]
    assert matmul_steps[0] == "m4/MatMul"
    assert "m5/MatMul" in matmul_steps
    assert matmul_steps.index("m5/MatMul") > matmul_steps.index("m4/MatMul")
    assert "poplin::MatMulPartial<float,float>" in out


@pytest.mark.slow
def test_tut4_oversized_variant_is_out_of_memory():
    proc = run_tut4("--oom")
    assert proc.returncode != 0
    err = proc.stderr.lower()
    assert "out of memory" in err or "outofmemory" in err
    assert "tile" in err  # names the worst tiles
