"""The notebooks of ``examples/notebooks``: committed stripped, and each runs top to bottom.

Each notebook has a cell tagged ``parameters`` holding ``SMALL = True`` and
``OUT_DIR = None``; the run sets ``SMALL = True`` and ``OUT_DIR`` to a temporary
directory in that cell (other parameters keep their values) and executes every cell in
a ``python3`` kernel of this interpreter. A cell that raises fails the test with the
notebook, the cell and the error.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "examples" / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
EXPECTED = {"getting_started.ipynb", "architecture_experiment.ipynb", "compare_and_calibrate.ipynb"}
#: Seconds one cell may take before the run is abandoned.
CELL_TIMEOUT_S = 300


def _strip_module() -> Any:
    spec = importlib.util.spec_from_file_location("notebook_strip", NOTEBOOK_DIR / "strip.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ids(paths: list[Path]) -> list[str]:
    return [p.stem for p in paths]


def parameter_cell(nb: Any) -> Any:
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1, "expected exactly one cell tagged 'parameters'"
    return cells[0]


def set_parameters(nb: Any, **values: Any) -> None:
    """Set ``NAME = value`` lines of the parameter cell (added when missing)."""
    cell = parameter_cell(nb)
    lines = cell.source.splitlines()
    for name, value in values.items():
        line = f"{name} = {value!r}"
        at = [i for i, text in enumerate(lines) if text.split("=")[0].strip() == name]
        if at:
            lines[at[0]] = line
        else:
            lines.append(line)
    cell.source = "\n".join(lines)


def test_the_notebooks_are_there():
    assert {p.name for p in NOTEBOOKS} == EXPECTED


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_committed_stripped(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.nbformat == 4
    assert _strip_module().problems(nb) == [], (
        f"{path.name} has outputs or execution counts; run: python examples/notebooks/strip.py"
    )
    cell = parameter_cell(nb)
    assert "SMALL = True" in cell.source.splitlines()
    assert "OUT_DIR = None" in cell.source.splitlines()


def test_strip_removes_outputs(tmp_path):
    strip = _strip_module()
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("1 + 1", execution_count=3)
    cell.outputs = [
        nbformat.v4.new_output("execute_result", data={"text/plain": "2"}, execution_count=3)
    ]
    cell.metadata["tags"] = ["parameters"]
    cell.metadata["execution"] = {"iopub.status.idle": "2024-01-01T00:00:00Z"}
    nb.cells = [nbformat.v4.new_markdown_cell("# title"), cell]
    path = tmp_path / "n.ipynb"
    nbformat.write(nb, path)
    assert strip.main(["--check", str(path)]) == 1
    assert strip.problems(nbformat.read(path, as_version=4)) == [
        "cell 1: 1 output(s), execution count 3, metadata 'execution'"
    ]
    assert strip.main([str(path)]) == 0
    stripped = nbformat.read(path, as_version=4)
    assert stripped.cells[1].outputs == [] and stripped.cells[1].execution_count is None
    assert stripped.cells[1].metadata == {"tags": ["parameters"]}
    assert strip.main(["--check", str(path)]) == 0


def execute(path: Path, out_dir: Path) -> Any:
    nb = nbformat.read(path, as_version=4)
    set_parameters(nb, SMALL=True, OUT_DIR=str(out_dir))
    client = nbclient.NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as exc:
        pytest.fail(f"{path.name} failed:\n{exc}", pytrace=False)
    return nb


def test_getting_started_runs(tmp_path):
    execute(NOTEBOOK_DIR / "getting_started.ipynb", tmp_path)
    events = json.loads((tmp_path / "timeline.json").read_text())["traceEvents"]
    assert any(e.get("name") == "mulCS" for e in events)
    for name in ("steps.png", "mulCS_balance.png"):
        assert (tmp_path / name).stat().st_size > 0


# A kernel and a sweep of 50 points or more: about 15 s of CPU. The sweep, its results
# and their plots are checked by test_sweep.py (a 64-point grid on two workers) and
# test_sweep_analysis.py; `make notebooks` and `make test-all` run the notebook itself.
@pytest.mark.slow
def test_architecture_experiment_runs(tmp_path):
    nb = execute(NOTEBOOK_DIR / "architecture_experiment.ipynb", tmp_path)
    from ipusim.sweep.analysis import load_results

    df = load_results(tmp_path / "results")
    assert len(df) >= 50 and (df["status"] == "ok").all()
    for name in ("cycles.png", "phases.png", "speedup.png", "flops.png"):
        assert (tmp_path / name).stat().st_size > 0
        assert (tmp_path / "report" / name).stat().st_size > 0
    text = "".join(
        o.get("data", {}).get("text/markdown", "") for c in nb.cells for o in c.get("outputs", [])
    )
    assert "Doubling `exchange.bytes_per_cycle` cuts the on-chip exchange cycles by" in text


@pytest.mark.slow
def test_compare_and_calibrate_runs(tmp_path):
    execute(NOTEBOOK_DIR / "compare_and_calibrate.ipynb", tmp_path)
    assert (tmp_path / "compare_hardware.png").stat().st_size > 0
    # The overlay it writes fits the C2 measurements (minus the C1 counter read) better
    # than the bow preset it extends: checked here by running the workload on both.
    from ipusim.config import load_config
    from ipusim.measured import read_measurements_csv
    from ipusim.runner import run_workload

    rows = {
        p.id: p.value
        for p in read_measurements_csv(ROOT / "tests/data/calibration/measurements.csv")
    }
    spec = str(ROOT / "examples" / "calibration" / "c_scaled_add.py")
    errors = {}
    for name, cfg in (("bow", load_config("bow")), ("fit", load_config(tmp_path / "bow-c2.yaml"))):
        errors[name] = [
            abs(
                run_workload(spec, cfg, {"n": n}).metrics["tile_cycles"]
                / (rows[f"C2.N{n}"] - rows["C1.overhead"])
                - 1
            )
            for n in (64, 128, 256, 512)
        ]
    assert max(errors["fit"]) < 0.01
    assert sum(errors["fit"]) < sum(errors["bow"])
