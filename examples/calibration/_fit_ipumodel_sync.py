"""Fit the IPU Model presets' sync delay on Poplibs' reduction benchmarks.

Poplibs' benchmark tools run on ``createTestDevice`` devices
(``lib/poplibs_support/TestDevice.cpp`` at 7eac0f26 and f927358): an ``IPUModel`` with
only ``numIPUs``, ``tilesPerIPU`` and ``compileIPUCode`` set, so every sync in their
runs pays the IPU Model's *default* sync delay (``minIPUSyncDelay`` and
``relativeSyncDelay = AUTO``), which no published document gives as a number. The
tutorial 7 profile that fitted the rest of the IPU Model presets was run with the delay
switched off (``minIPUSyncDelay = 0``, ``NO_DELAY``) and says nothing about it.

The reduction benchmarks of Poplibs' ``tests/benchmark_results.csv`` at f927358 are
timed by the ``reduce_op`` tool, whose runs are a few syncs and short compute sets: their
totals pin the delay. Eighteen runs, IPU Model Mk1 and Mk2: the five ``bert_reduce_*``
(rows ``J-bert_reduce-*`` of ``tests/data/calibration/measurements.csv``) and the four
``resnet50_tr_bs1_*_reduce`` (shapes in ``tests/CMakeLists.txt`` there, totals below).

Every sync of a run releases its tiles ``min_sync_delay_cycles + relative_delay[tile]``
after the last arrival, so a run's total is linear in the delay, ``t0 + syncs * d``:
each run is simulated at two delays (slope and intercept), the fit takes the integer
delay with the least mean absolute relative error over the eighteen runs, and a third
simulation at the fitted delay checks the line. The relative delay keeps the mk
presets' ``auto`` profile (up to ``max_relative_delay_cycles``).

Run from the repository root (about three minutes)::

    .venv/bin/python examples/calibration/_fit_ipumodel_sync.py [--joint]

``--joint`` looks at ``exchange.cycles_per_message`` (fitted on T7's internal exchange
alone, ``make_presets.py``) and the delay together: each run and tutorial 7 (with its
IPU Model's sync settings) built once and re-timed; for each per-message cost of
:data:`JOINT_CPM` the delay of :data:`JOINT_DELAYS` with the least mean relative error
over the eighteen runs and T7's internal-exchange phase, weighted alike
(docs/calibration.md, "The single-row fits looked at again").
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ipusim.config import load_config  # noqa: E402
from ipusim.measured import read_profile  # noqa: E402
from ipusim.runner import run_workload  # noqa: E402

WORKLOAD = "examples/calibration/j_poplibs_bench.py"
MEASUREMENTS = ROOT / "tests" / "data" / "calibration" / "measurements.csv"
PRESETS = {"ipum1": "mk1-ipumodel", "ipum2": "mk2-ipumodel"}

#: ``resnet50_tr_bs1_*_reduce`` of Poplibs f927358: (shape, dims, operation, tiles per
#: IPU, 0 = all) from ``tests/CMakeLists.txt`` and the IPU Model totals (cycles) of
#: ``tests/benchmark_results.csv`` (rows ``IpuModel1`` and ``IpuModel2``).
RESNET = {
    "resnet50 cnv": (([4, 25088, 8], [1], "SQUARE_ADD", 0), {"ipum1": 3232, "ipum2": 3040}),
    "resnet50 bm64L0A0": (([4, 6272, 8], [1], "ADD", 1200), {"ipum1": 2811, "ipum2": 2811}),
    "resnet50 bm128L0A0": (([4, 3136, 8], [1], "ADD", 0), {"ipum1": 2611, "ipum2": 2536}),
    "resnet50 bm128L0": (([4, 12544, 8], [1], "ADD", 0), {"ipum1": 3125, "ipum2": 3357}),
}

#: The two delays each run is simulated at (cycles) to get its line.
PROBES = (0, 200)
#: The mk presets' ``min_sync_delay_cycles``, which the IPU Model presets took before.
MK_DELAY = 15
#: Loss margin (absolute) of the delays reported as equally good.
FLAT = 0.005
#: Delays searched (cycles).
SEARCH = np.arange(0, 1001)
#: ``--joint``: per-message costs tried (cycles) and the delays searched for each.
JOINT_CPM = np.round(np.arange(1.60, 3.01, 0.04), 2)
JOINT_DELAYS = np.arange(100, 351)
#: Tutorial 7's IPU Model profile and settings (``make_presets.py``).
T7_PROFILE = ROOT / "tests" / "data" / "calibration" / "tut7_10000x1000_mk2_ipumodel_sdk2.txt"
T7_DEVICE = {"sync.min_sync_delay_cycles": 0, "sync.relative_delay": "none"}


def runs() -> list[tuple[str, str, dict, float]]:
    """The eighteen runs: (label, preset, workload parameters, measured total)."""
    spec = importlib.util.spec_from_file_location("j_poplibs_bench", ROOT / WORKLOAD)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    measured = {}
    with MEASUREMENTS.open(newline="") as f:
        for row in csv.DictReader(f):
            if row["id"].startswith("J-bert_reduce-"):
                measured[row["id"]] = float(row["value"])
    out = []
    for row_id, value in sorted(measured.items()):
        params = dict(bench.POINTS[row_id])
        out.append((row_id, PRESETS[row_id.rsplit(".", 1)[1]], params, value))
    for name, ((shape, dims, op, tiles), totals) in RESNET.items():
        for model, value in totals.items():
            params = {"kind": "reduce", "shape": shape, "dims": dims, "op": op, "tiles": tiles}
            out.append((f"{name}.{model}", PRESETS[model], params, float(value)))
    return out


def simulate(preset: str, params: dict, delay: int) -> float:
    """Total cycles of one run with ``sync.min_sync_delay_cycles = delay``."""
    cfg = load_config(preset, overrides={"sync.min_sync_delay_cycles": int(delay)})
    return float(run_workload(WORKLOAD, cfg, params).metrics["total_cycles"])


def losses(t0: np.ndarray, slope: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """Mean |relative error| of the runs' lines at each delay of :data:`SEARCH`."""
    sim = t0[None, :] + slope[None, :] * SEARCH[:, None]
    return np.mean(np.abs(sim - measured) / measured, axis=1)


def joint() -> int:
    """Print, per per-message cost, T7's internal-exchange error and the best delay of
    the joint loss (T7's phase and the eighteen runs), and the J-only best."""
    t7_measured = read_profile(T7_PROFILE).phases["internal_exchange"]
    t7_cfg = load_config("mk2-ipumodel", overrides=T7_DEVICE)
    t7 = run_workload("examples/calibration/t7_matvec.py", t7_cfg, {"rows": 10000, "cols": 1000})
    table = runs()
    built = [run_workload(WORKLOAD, load_config(p), params) for _, p, params, _ in table]
    measured = np.array([m for *_, m in table])

    def totals(cpm: float, delay: int) -> np.ndarray:
        over = {"exchange.cycles_per_message": cpm, "sync.min_sync_delay_cycles": delay}
        return np.array(
            [float(r.retime(load_config(p, overrides=over)).total_cycles)
             for (_, p, _, _), r in zip(table, built, strict=True)]
        )  # fmt: skip

    lo, hi = PROBES
    head = ("cycles/msg", "T7 int.exch", "joint d", "loss", "J d", "J loss")
    print(" ".join(f"{h:>11}" for h in head))
    for cpm in JOINT_CPM:
        over = {**T7_DEVICE, "exchange.cycles_per_message": cpm}
        trace = t7.retime(load_config("mk2-ipumodel", overrides=over))
        e7 = trace.totals["internal_exchange"] / trace.num_tiles / t7_measured - 1
        t0, t1 = totals(cpm, lo), totals(cpm, hi)
        sim = t0[None, :] + (t1 - t0)[None, :] / (hi - lo) * JOINT_DELAYS[:, None]
        err = np.abs(sim - measured) / measured
        loss = (err.sum(axis=1) + abs(e7)) / (len(measured) + 1)
        k, kj = int(np.argmin(loss)), int(np.argmin(err.mean(axis=1)))
        print(f"{cpm:11.2f} {100 * e7:+10.2f}% {JOINT_DELAYS[k]:11d} {100 * loss[k]:10.3f}% "
              f"{JOINT_DELAYS[kj]:11d} {100 * err.mean(axis=1)[kj]:10.3f}%")  # fmt: skip
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--joint", action="store_true", help="the per-message cost and delay")
    if parser.parse_args().joint:
        return joint()
    table = runs()
    lo, hi = PROBES
    t0 = np.array([simulate(p, params, lo) for _, p, params, _ in table])
    t1 = np.array([simulate(p, params, hi) for _, p, params, _ in table])
    measured = np.array([m for *_, m in table])
    slope = (t1 - t0) / (hi - lo)  # syncs per run
    loss_by_delay = losses(t0, slope, measured)
    k = int(np.argmin(loss_by_delay))
    delay, loss = int(SEARCH[k]), float(loss_by_delay[k])
    flat = SEARCH[loss_by_delay <= loss + FLAT]
    check = np.array([simulate(p, params, delay) for _, p, params, _ in table])
    line = t0 + slope * delay
    before = float(np.mean(np.abs(t0 - measured) / measured))
    inherited = t0 + slope * MK_DELAY
    before_mk = float(np.mean(np.abs(inherited - measured) / measured))
    print(f"{'run':28} {'measured':>9} {'syncs':>5} {'d=0':>7} {'fitted':>7} {'error':>7}")
    for (label, *_), m, s, a, c in zip(table, measured, slope, t0, check, strict=True):
        print(f"{label:28} {m:9.0f} {s:5.1f} {a:7.0f} {c:7.0f} {100 * (c / m - 1):+6.1f}%")
    err = np.abs(check - measured) / measured
    print(f"fitted sync.min_sync_delay_cycles = {delay}")
    print(f"mean |error| of the 18 runs: {100 * before:.1f} % at 0, {100 * before_mk:.1f} % at "
          f"{MK_DELAY} (the mk presets'), {100 * err.mean():.1f} % at {delay} "
          f"(line {100 * loss:.1f} %); worst {100 * err.max():.1f} %")  # fmt: skip
    j = np.array([label.startswith("J-") for label, *_ in table])
    print(f"within {100 * FLAT:.1f} point of the least loss: delays {flat.min()}..{flat.max()}")
    print(f"J-bert_reduce rows: {100 * err[j].mean():.1f} %")
    if not np.allclose(check, line):
        print("warning: a run is not linear in the delay:", np.nonzero(~np.isclose(check, line)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
