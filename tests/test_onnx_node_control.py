"""ONNX's backend node tests of the ops PopART lowers to control programs and of
RoiAlign (If, Loop through the expanded Range, Scan) in the default suite; the slow
test of ``tests/test_onnx_backend.py`` runs every node test."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from popart_api import onnx_tests

#: Node tests that pass (test name pattern).
PASSING = re.compile(r"^test_(if|scan9_\w+|range_(float|float16|int32)_\w+_expanded|roialign_\w+)$")


def _collect() -> list[Path]:
    try:
        data_dir = onnx_tests.ensure_data_dir(generate=True)
    except Exception:  # no data: test_onnx_backend.test_data_available reports it
        return []
    return [p for p in onnx_tests.list_tests(data_dir) if PASSING.match(p.name)]


PATHS = _collect()


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_control_flow_and_roialign_node_tests_pass(path: Path) -> None:
    result = onnx_tests.run_test(path)
    assert result.in_scope
    assert result.status == "pass", f"{result.status}: {result.reason}"


def test_popart_refusals_are_clear() -> None:
    """test_loop11 slices by the iteration count (PopART needs a Slice's starts when it
    builds its graph); test_scan_sum is Scan-8 (PopART registers Scan 9 and 11)."""
    if not PATHS:
        pytest.skip("no node-test data")
    data_dir = PATHS[0].parent
    loop = onnx_tests.run_test(data_dir / "test_loop11")
    assert (loop.status, loop.kind) == ("error", "popart")
    assert "Slice" in loop.reason and "'starts'" in loop.reason
    assert "to determine the output shape" in loop.reason  # PopART's SliceOp's reason
    scan8 = onnx_tests.run_test(data_dir / "test_scan_sum")
    assert scan8.status == "unsupported" and "opset 9" in scan8.reason
