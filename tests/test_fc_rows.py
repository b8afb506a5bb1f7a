"""The fully-connected J rows against Poplibs' published IPU Model cycles.

Every ``J-fc_layer_*`` row of ``tests/data/calibration/measurements.csv`` (Poplibs'
``tests/benchmark_results.csv`` at f927358: the ``fully_connected_layer`` tool's two runs,
forward then backward with the weight update) is run as ``report.py`` runs it, on its
row's IPU Model preset. Issue 28's bar: no row beyond +-50 % and, per generation, a mean
absolute error of at most 15 %.
"""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest

from ipusim.runner import run_workload

ROOT = Path(__file__).resolve().parents[1]
FC = ROOT / "examples" / "calibration" / "fc_fully_connected.py"
CSV = ROOT / "tests" / "data" / "calibration" / "measurements.csv"


def _fc_module():
    spec = importlib.util.spec_from_file_location("fc_fully_connected_rows", FC)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="with the training passes planned as Poplibs' createPlan does (joint or separate, "
    "separate passes in either operand order, b0546cf) and scaledAddTo regrouping the weight "
    "update's product as Poplibs' regroupIfBeneficial does, the means are Mk1 16.3 %, Mk2 "
    "15.1 % and J-fc_layer_1_1000_1000_float.ipum1 is -53.9 % (15,749 cycles against 34,192 "
    "measured). The regroup runs on 4 rows (1440x100x200.ipum1, 4_1000_1000_half.ipum1, "
    "80_1324_100 on both), each moving closer to its measurement; on the others Poplibs' "
    "rule does not regroup: J-fc_layer_1_1000_1000_half.ipum2's weights, laid out by a "
    "swapped HMAC forward plan (5 output channels per tile), group by 5, which is off the "
    "half regroup grain of 4",
)
def test_fully_connected_rows_within_the_issue_bar() -> None:
    fc = _fc_module()
    measured = {r["id"]: float(r["value"]) for r in csv.DictReader(CSV.open())}
    errors: dict[str, dict[str, float]] = {"ipum1": {}, "ipum2": {}}
    for row, params in fc.POINTS.items():
        res = run_workload(str(FC), fc.POINT_CONFIGS[row], params)
        want = measured[row]
        errors[row.rsplit(".", 1)[1]][row] = (res.metrics["total_cycles"] - want) / want
    assert sum(len(e) for e in errors.values()) == 40
    for gen, errs in errors.items():
        worst = max(errs, key=lambda r: abs(errs[r]))
        assert abs(errs[worst]) <= 0.50, f"{worst}: {errs[worst]:+.1%}"
        mean = sum(abs(e) for e in errs.values()) / len(errs)
        assert mean <= 0.15, f"{gen}: mean |error| {mean:.1%}"
