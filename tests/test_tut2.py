"""Tutorial 2 (popops.add): the printed tensors, run as a user runs the script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
from examples_common import load_example

from poplar_api import Device, Graph, IPUModel

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "tutorials" / "tut2.py"

V1 = np.array([[1.0, 1.5], [2.0, 2.5]])  # constant c1 copied into the flattened v1
V2 = np.array([[4.0, 3.0], [2.0, 1.0]])  # constant c2 copied into the flattened v2


def block(name: str, m: np.ndarray) -> list[str]:
    """PrintTensor lines of a 2x2 tensor, e.g. ``v3: {`` / `` {5,4.5},`` / ... / ``}``."""
    rows = [" {" + ",".join(f"{x:g}" for x in row) + "}" for row in m]
    return [f"{name}: {{", rows[0] + ",", rows[1], "}"]


def test_tut2_prints_v3_v4_v5():
    v3 = V1 + V2  # {{5,4.5},{4,3.5}}
    v4 = v3 + V2  # {{9,7.5},{6,4.5}}
    v5 = V1 + V2.T  # {{5,3.5},{5,3.5}}
    assert v3.tolist() == [[5, 4.5], [4, 3.5]]
    assert v4.tolist() == [[9, 7.5], [6, 4.5]]
    assert v5.tolist() == [[5, 3.5], [5, 3.5]]
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = block("v3", v3) + block("v4", v4) + block("v5", v5)
    assert proc.stdout.splitlines() == expected


def test_tut2_in_process_values_and_layout():
    tut2 = load_example("tutorials/tut2.py")
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    _, tensors = tut2.build(graph)
    # v2^T[i][j] = v2[j][i] lives on tile i*2+j, like v1[i][j]: so does v5
    assert graph.getTileMapping(tensors["v5"]) == graph.getTileMapping(tensors["v1"])
    # each add: one element per tile, so one 1-D multi-vertex on each of tiles 0..3
    verts = graph._state.vertices
    assert [v.vtype.name for v in verts] == [
        "popops::BinaryOp1D<popops::expr::BinaryOpType::ADD,float>"
    ] * 12
    assert sorted(v.tile for v in verts) == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    values, _ = tut2.run(Device.createCPUDevice("ipu2"))
    np.testing.assert_array_equal(values["v5"], V1 + V2.T)
    np.testing.assert_array_equal(values["v4"], V1 + 2 * V2)
