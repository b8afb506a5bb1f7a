"""Fit the counted-execution cost table (``counted.*``) with ``ipusim.calibrate``.

Counted execution prices the operations a kernel executes (docs/counted_cycles.md). Two
of its costs are not published and are fitted here, in thread cycles, on hardware
measurements of compiled C++ codelets whose Python ports are counted:

* ``counted.pairing``: the fraction of the shorter pipeline's instructions that the
  compiler bundles with the other pipeline's; tutorial 7's hardware compute (a float
  dot product: per element two loads and a loop step on the main pipeline, a multiply
  and an add on the float pipeline) identifies it;
* ``counted.float_div_cycles``: a float division; the D pi loop (one division per
  iteration among five float operations) identifies it.

A3 (the lightweight-profiling example 2: a supervisor loop on a ``volatile`` int, all
main-pipeline work) is reported with the fitted values; no fitted cost moves it. With
``--predict`` the rows whose kernels are the measured codelets written with
:mod:`poplar_api.ipu_intrinsics` are reported too, predicted with the fitted values:
F1.tflops (the STREAM Triad assembly loop, about 5 minutes on 2 shared cores) and the
three H1.1ipu compute rows (the Gaussian blur codelets, on ``mk1``). Runs
are counted (``vertexCycles("counted")``) on the ``mk2`` preset (1472 tiles; D was
measured on a Bow, whose worker ISA and tile count are the same, and its metric is in
cycles).

Run from the repository root (prints the report; writes nothing)::

    .venv/bin/python examples/calibration/_fit_counted.py [--all] [--predict]
"""

from __future__ import annotations

import csv
import sys
import warnings
from pathlib import Path

from ipusim.calibrate import CalibrationResult, Pair, calibrate
from ipusim.config import load_config
from ipusim.measured import MeasuredProfile, read_profile
from poplar_api.counted import vertexCycles

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[1] / "tests" / "data" / "calibration"
PARAMETERS = [("counted.pairing", 0.0, 1.0), ("counted.float_div_cycles", 1.0, 40.0)]
#: D points used (the larger one runs 4.3e9 loop iterations: add it with --all).
D_POINTS = {"D1.n1000": 1000}
D_ALL = {"D1.n1000": 1000, "D1.n2917776": 2917776}


def csv_rows() -> dict[str, dict[str, str]]:
    with open(DATA / "measurements.csv", newline="", encoding="utf-8") as f:
        return {r["id"]: r for r in csv.DictReader(f)}


def _metric(source: str, name: str, value: float) -> MeasuredProfile:
    return MeasuredProfile(source=source, format="csv", phases={}, metrics={name: value})


def pairs(d_points: dict[str, int]) -> tuple[list[Pair], list[Pair]]:
    """The fitted pairs (T7 hardware compute, D) and the checked ones (A3)."""
    rows = csv_rows()
    t7 = read_profile(DATA / "tut7_10000x1000_mk2_hardware.txt")
    fitted = [
        Pair(
            "examples/calibration/t7_matvec.py",
            {"rows": 10000, "cols": 1000},
            _metric("T7 hardware", "tile_avg_compute_cycles", t7.phases["compute"]),
            label="T7.hardware:compute",
        )
    ]
    for rid, n in d_points.items():
        value = float(rows[rid]["value"])
        fitted.append(
            Pair("examples/calibration/d_pi.py", {"n": n},
                 _metric(rid, "vertex_loop_cycles", value), label=rid)
        )  # fmt: skip
    checked = [
        Pair("examples/calibration/a_lightweight_profiling.py", {"example": "a3", "iterations": i},
             _metric(f"A3.{i}", "first_block_cycles", float(rows[f"A3.{i}"]["value"])),
             label=f"A3.{i}")
        for i in range(1, 6)
    ]  # fmt: skip
    return fitted, checked


def predicted_pairs() -> list[tuple[str, list[Pair], str]]:
    """(preset, pairs, metric) of the rows predicted with ``--predict``."""
    rows = csv_rows()
    triad = [
        Pair("examples/calibration/f_stream_triad.py", {"n": 7500, "repeats": 2},
             _metric("F1.tflops", "throughput", float(rows["F1.tflops"]["value"])),
             label="F1.tflops")
    ]  # fmt: skip
    blur = [
        Pair("examples/calibration/h_gaussian_blur.py",
             {"data_type": dt, "height": 1400, "width": 2000},
             _metric(f"H1.1ipu.{dt}.compute", "phase_cycles.compute",
                     float(rows[f"H1.1ipu.{dt}.compute"]["value"])),
             label=f"H1.1ipu.{dt}.compute")
        for dt in ("float", "float2", "half4")
    ]  # fmt: skip
    return [("mk2", triad, "throughput"), ("mk1", blur, "phase_cycles.compute")]


#: A cost none of the ``--predict`` kernels uses (they divide by powers of two only):
#: the predicted rows are reported with it, so nothing is fitted to them.
UNUSED = [("counted.int_div_cycles", 1.0, 100.0)]


def predict(values: dict[str, float]) -> list[CalibrationResult]:
    """The ``--predict`` rows under the counted costs ``values`` (nothing fitted)."""
    results = []
    with vertexCycles("counted"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for preset, found, metric in predicted_pairs():
            cfg = load_config(preset, overrides=values)
            results.append(
                calibrate(found, cfg, UNUSED, phases=(), metrics=[metric],
                          max_evaluations=1)
            )  # fmt: skip
    return results


def fit(d_points: dict[str, int]) -> list[CalibrationResult]:
    fitted, checked = pairs(d_points)
    base = load_config("mk2")
    with vertexCycles("counted"):
        result = calibrate(
            fitted, base, PARAMETERS, phases=(),
            metrics=["tile_avg_compute_cycles", "vertex_loop_cycles"], extends="mk2",
        )  # fmt: skip
        after = load_config("mk2", overrides=result.values_after)
        with warnings.catch_warnings():  # the check fits nothing; its report says so
            warnings.simplefilter("ignore", UserWarning)
            check = calibrate(checked, after, [PARAMETERS[0]], phases=(),
                              metrics=["first_block_cycles"], max_evaluations=1)  # fmt: skip
    return [result, check]


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    results = fit(D_ALL if "--all" in args else D_POINTS)
    if "--predict" in args:
        results += predict(dict(results[0].values_after))
    for i, result in enumerate(results):
        print(f"== counted step {i + 1}")
        print(result.report())
        print(result.values_after)
    return 0


if __name__ == "__main__":
    sys.exit(main())
