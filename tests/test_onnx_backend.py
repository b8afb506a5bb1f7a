"""ONNX's backend node tests run against popart_api (see popart_api/onnx_tests.py).

The fast tests are every *supported* node test (classified against the live op
registry) of a few basic op types; the slow test runs every node test, checks that
nothing crashes (an exception that is not a ``popart_exception``) and that no test
recorded as passing in ``tests/data/onnx_backend_counts.json`` regressed. Re-record
with ``python -m popart_api.onnx_tests --record`` after adding ops.

When the installed onnx ships no node-test data (onnx 1.23 wheels do not), the data
is generated once from onnx's own test-case generators into the user cache.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx_data import generation_lock

from popart_api import onnx_tests

#: Op types of the fast subset.
FAST_OPS = (
    "Add",
    "Sub",
    "Mul",
    "Div",
    "MatMul",
    "Gemm",
    "Relu",
    "Sigmoid",
    "Tanh",
    "Softmax",
    "Sqrt",
    "Exp",
    "Log",
    "Reshape",
    "Transpose",
    "Identity",
)
#: At most this many fast tests (each takes ~0.02-0.5 s on the 8-tile IPU Model).
FAST_CAP = 200

#: Fast tests expected to fail: test name -> the reason found. Empty today.
KNOWN_FAILURES: dict[str, str] = {}

#: Crashes (non-popart exceptions) the slow test tolerates: test name -> the bug.
#: Empty today (test_maxpool_with_argmax_2d_precomputed_pads crashed with a KeyError in
#: InferenceSession.prepareDevice until the session checked anchors for a value).
KNOWN_CRASHES: dict[str, str] = {}


def _collect() -> tuple[list[Path], str]:
    """The fast test directories, or ``([], error message)`` when there is no data."""
    try:  # (generated once: the lock waits for the process conftest started)
        with generation_lock(onnx_tests.cache_data_dir()):
            data_dir = onnx_tests.ensure_data_dir(generate=True)
    except Exception as exc:  # reported by test_data_available
        return [], f"{type(exc).__name__}: {exc}"
    paths = onnx_tests.list_tests(data_dir, FAST_OPS)
    return [p for p in paths if onnx_tests.classify(p) is None][:FAST_CAP], ""


FAST, DATA_ERROR = _collect()


def test_data_available() -> None:
    assert not DATA_ERROR, DATA_ERROR
    assert FAST, f"no supported node test of {FAST_OPS}"


@pytest.mark.parametrize("path", FAST, ids=[p.name for p in FAST])
def test_node(path: Path) -> None:
    if path.name in KNOWN_FAILURES:
        pytest.xfail(KNOWN_FAILURES[path.name])
    result = onnx_tests.run_test(path)
    assert result.status == "pass", f"{result.status} ({result.kind}): {result.reason}"


def test_missing_data_dir_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(onnx_tests.OnnxDataMissing, match=str(tmp_path)):
        onnx_tests.find_data_dir(tmp_path)
    assert onnx_tests.main(["--data-dir", str(tmp_path)]) == 2


def test_compare_reports_the_difference() -> None:
    import numpy as np

    expected = np.zeros((2, 3), np.float32)
    assert onnx_tests.compare("y", expected + 1e-6, expected) == ("", None)
    reason, diff = onnx_tests.compare("y", expected + 0.5, expected)
    assert "6/6 elements differ" in reason and diff == pytest.approx(0.5)
    reason, diff = onnx_tests.compare("y", expected.T, expected)
    assert "shape [3, 2] != expected [2, 3]" in reason and diff is None
    reason, _ = onnx_tests.compare("i", np.array([1, 2], np.int32), np.array([1, 3], np.int64))
    assert "1/2 elements differ" in reason


def test_classification_uses_the_live_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    from onnx import TensorProto
    from popart_harness import relu_model

    from popart_api import ops

    model = relu_model(14)
    assert onnx_tests.unsupported_reason(model) is None
    monkeypatch.delitem(ops.REGISTRY, ("ai.onnx", "Relu"))
    assert "ai.onnx::Relu" in onnx_tests.unsupported_reason(model)
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    monkeypatch.setitem(ops.REGISTRY, ("ai.onnx", "Relu"), [(6, lambda *a: [])])
    assert "DOUBLE" in onnx_tests.unsupported_reason(model)


@pytest.mark.slow
def test_all_node_tests() -> None:
    assert not DATA_ERROR, DATA_ERROR
    data_dir = onnx_tests.ensure_data_dir(generate=True)
    results = onnx_tests.run_all(onnx_tests.list_tests(data_dir))
    crashes = [
        f"{r.name}: {r.reason}"
        for r in results
        if r.status == "error" and r.kind == "crash" and r.name not in KNOWN_CRASHES
    ]
    assert not crashes, "crashes (not a popart_exception):\n" + "\n".join(crashes)
    recorded = onnx_tests.load_counts()
    passed = {r.name for r in results if r.status == "pass"}
    present = {r.name for r in results}
    lost = sorted(n for n in recorded["passed_tests"] if n in present and n not in passed)
    reasons = {r.name: f"{r.status}: {r.reason}" for r in results}
    assert not lost, "tests that passed when recorded no longer pass:\n" + "\n".join(
        f"{n}: {reasons[n]}" for n in lost
    )
    same_data = recorded["data"] == onnx_tests.data_source(data_dir) and (
        recorded["onnx"] == onnx.__version__
    )
    if same_data:
        assert len(passed) >= recorded["counts"]["pass"], onnx_tests.counts_line(
            onnx_tests.summarize(results)
        )
