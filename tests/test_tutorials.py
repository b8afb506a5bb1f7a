"""The tutorial scripts of examples/tutorials, run as a user runs them and in-process.

Expected lines are those of the Poplar guide's tutorials (shared tutorials.md); the
numbers they contain are recomputed here where that is possible (sums written out,
closed-form products, the cost model re-derived by brute force).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from examples_common import call_main, load_example

from ipusim.config import load_config
from poplar_api import Device, IPUModel

TUTORIALS = Path(__file__).resolve().parents[1] / "examples" / "tutorials"

# Tiles of the two IPU Models (GC2 and GC200), used in the cost-model expectations.
IPU1_TILES = 1216
IPU2_TILES = 1472


def run_script(name: str, *args: str, timeout: float = 900) -> list[str]:
    """Run ``examples/tutorials/<name>`` as a user would; return its stdout lines."""
    proc = subprocess.run(
        [sys.executable, str(TUTORIALS / name), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, (
        f"{name} {' '.join(args)} exited with {proc.returncode}\n"
        f"--- stdout (end) ---\n{proc.stdout[-3000:]}\n--- stderr (end) ---\n{proc.stderr[-5000:]}"
    )
    return proc.stdout.splitlines()


def tutorial(name: str) -> ModuleType:
    """Import ``examples/tutorials/<name>.py`` as a module (once per session)."""
    return load_example(f"tutorials/{name}.py")


def matvec_expected(rows: int, cols: int) -> np.ndarray:
    """``(r*c) @ c`` in closed form: row r is r * sum(c^2) = r * (C-1) C (2C-1) / 6."""
    sum_sq = (cols - 1) * cols * (2 * cols - 1) // 6
    return np.arange(rows, dtype=np.float64) * sum_sq


def compute_record(trace, name: str):
    """The single compute record of compute set ``name`` in ``trace``."""
    found = [r for r in trace.records if r.kind == "compute" and r.name == name]
    assert len(found) == 1, (
        f"expected one compute record named {name!r}, got {len(found)}; records: "
        f"{[(r.kind, r.name) for r in trace.records]}"
    )
    return found[0]


# --------------------------------------------------------------------------- tut1


def test_tut1_prints_the_guide_output():
    c1 = [1, 1.5, 2, 2.5]
    stream = list(range(30))  # the host's circular buffer 0..29, 10 per copy
    h3 = np.zeros((4, 4))
    h3[1, 1:4] = c1[:3]  # Copy(v1.slice(0, 3), v3.slice({1, 1}, {2, 4}))
    assert h3[1].tolist() == [0, 1, 1.5, 2]
    expected = [
        "Running program",
        "v1-debug: {1,1.5,2,2.5}",
        "v2-debug: {1,1.5,2,2.5}",
        "v4-0: {" + ",".join(str(x) for x in stream[0:10]) + "}",
        "v4-1: {" + ",".join(str(x) for x in stream[10:20]) + "}",
        "Program complete",
        "h3 data:",
        "  0 0 0 0 ",
        "  0 1 1.5 2 ",
        "  0 0 0 0 ",
        "  0 0 0 0 ",
    ]
    assert expected[3] == "v4-0: {0,1,2,3,4,5,6,7,8,9}"
    assert expected[4] == "v4-1: {10,11,12,13,14,15,16,17,18,19}"
    # in this process: the README's first commands (test_docs_examples, README.md:35) run
    # the script as a process of its own
    assert call_main("tutorials/tut1.py").stdout.splitlines() == expected


# --------------------------------------------------------------------------- tut3


def test_tut3_prints_the_sums():
    # vertex i sums v1[i:4] of {1, 1.5, 2, 2.5}: 7, 6, 4.5, 2.5
    assert [1 + 1.5 + 2 + 2.5, 1.5 + 2 + 2.5, 2 + 2.5, 2.5] == [7, 6, 4.5, 2.5]
    assert run_script("tut3.py") == ["v2: {7,6,4.5,2.5}"]


# --------------------------------------------------------------------------- tut6


def test_tut6_prints_the_guide_lines():
    assert run_script("tut6.py", "40", "50") == [
        "Multiplying matrix of size 40x50 by vector of size 50",
        "Creating environment (compiling vertex programs)",
        "Constructing compute graph and control program",
        "Running graph program to multiply matrix by vector",
        "Multiplication result OK",
    ]


def test_tut6_rejects_a_bad_size_clearly():
    proc = subprocess.run(
        [sys.executable, str(TUTORIALS / "tut6.py"), "0", "50"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert "0 must be at least 1" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_tut6_host_reference_sums_in_float32_order():
    tut6 = tutorial("tut6")
    matrix = np.array([[1.0, 1e8, -1e8]], np.float32)
    vector = np.ones(3, np.float32)
    # in order in float32: (0 + 1) + 1e8 rounds to 1e8, minus 1e8 leaves 0 (not 1)
    assert tut6.host_matvec_in_order(matrix, vector).tolist() == [0.0]
    m, v = tut6.host_data(3, 4)
    np.testing.assert_array_equal(m, [[0, 0, 0, 0], [0, 1, 2, 3], [0, 2, 4, 6]])
    np.testing.assert_array_equal(v, [0, 1, 2, 3])


# --------------------------------------------------------------------------- tut7 cost model


def brute_force_costs(rows: int, cols: int, tiles: int) -> list[tuple[int, int]]:
    """(split, total) for every split, from the formula of the guide written out again."""
    out = []
    for s in range(1, cols):
        per_tile = max(-(-rows * s // tiles), 1)  # ceil(rows*s / tiles)
        seg = -(-cols // s)
        compute = -(-per_tile // 6) * 6 * (5 + (seg + 1) // 2)
        exchange = -(-per_tile // rows) * seg * 4 // 4
        per_tile_r = max(-(-rows // tiles), 1)
        reduce_compute = -(-per_tile_r // 6) * 6 * (5 + (s + 1) // 2)
        reduce_exchange = per_tile_r * s * 4 // 4
        out.append((s, compute + exchange + reduce_compute + reduce_exchange))
    return out


# (rows, cols, tiles, split, total, worst), as listed in the guide
GUIDE_SPLITS = [
    (40, 50, IPU2_TILES, 5, 123, 267),
    (40, 50, IPU1_TILES, 5, 123, 267),
    (1000, 1000, IPU2_TILES, 17, 580, 8135),
    (1000, 1000, IPU1_TILES, 14, 650, 8963),
    (5000, 2000, IPU2_TILES, 7, 3920, 54782),
    (5000, 2000, IPU1_TILES, 13, 4719, 65349),
    (10000, 1000, IPU2_TILES, 7, 3996, 53807),
    (10000, 1000, IPU1_TILES, 5, 4751, 64373),
]


@pytest.mark.parametrize(("rows", "cols", "tiles", "split", "total", "worst"), GUIDE_SPLITS)
def test_tut7_cost_model_matches_the_guide(rows, cols, tiles, split, total, worst):
    tut7 = tutorial("tut7")
    best, worst_seen = tut7.choose_split(rows, cols, tiles, 6, 4)
    assert (best.split, best.total, worst_seen) == (split, total, worst)
    costs = brute_force_costs(rows, cols, tiles)
    totals = [t for _, t in costs]
    assert best.total == min(totals)
    assert best.split == costs[totals.index(min(totals))][0]  # first of the minima
    assert worst_seen == max(totals)


def test_tut7_cost_lines_for_10000x1000():
    tut7 = tutorial("tut7")
    ipu2, _ = tut7.choose_split(10000, 1000, IPU2_TILES, 6, 4)
    ipu1, _ = tut7.choose_split(10000, 1000, IPU1_TILES, 6, 4)
    # ipu2, split 7: ceil(70000/1472) = 48 vertices a tile, 48 x (5 + (143 + 1) // 2) = 3696
    assert ipu2.compute == 48 * 77 == 3696
    assert ipu2.describe() == (
        "colsAxisSplit=7, total cost=3996 (compute cost=3696, exchange cost=143, "
        "reduce exchange cost=49, reduce compute cost=108)"
    )
    assert ipu1.describe() == (
        "colsAxisSplit=5, total cost=4751 (compute cost=4410, exchange cost=200, "
        "reduce exchange cost=45, reduce compute cost=96)"
    )


def test_tut7_cost_model_keeps_the_first_strict_minimum():
    tut7 = tutorial("tut7")
    # 1 row, 5 columns, 100 tiles (one vertex a tile; 6 worker slots each):
    #   split 1: 6*(5 + 6//2) + 5*4//4 + 6*(5 + 2//2) + 1*4//4 = 48 + 5 + 36 + 1 = 90
    #   split 2: 6*(5 + 4//2) + 3     + 6*(5 + 3//2) + 2     = 42 + 3 + 36 + 2 = 83
    #   split 3: 6*(5 + 3//2) + 2     + 6*(5 + 4//2) + 3     = 36 + 2 + 42 + 3 = 83
    #   split 4: 6*(5 + 3//2) + 2     + 6*(5 + 5//2) + 4     = 36 + 2 + 42 + 4 = 84
    # splits 2 and 3 tie: the first one is kept; the worst is 90.
    best, worst = tut7.choose_split(1, 5, 100, 6, 4)
    assert (best.split, best.total, worst) == (2, 83, 90)
    assert best == tut7.SplitCost(2, compute=42, exchange=3, reduce_exchange=2, reduce_compute=36)


def test_tut7_cost_model_rejects_a_single_column():
    tut7 = tutorial("tut7")
    with pytest.raises(ValueError, match="1x1 matrix has no column split"):
        tut7.choose_split(1, 1, 100, 6, 4)


def test_tut7_relative_error_check():
    tut7 = tutorial("tut7")
    result = np.array([0.0, 0.5, 100.001, 100.0], np.float32)
    expected = np.array([0.0, 0.0, 100.0, 100.0])
    errors = tut7.relative_errors(result, expected)
    assert errors[0] == 0  # 0 where 0 was expected
    assert errors[1] == np.inf  # any difference from an expected 0
    # float32(100.001) is 100.00099945068359375: relative error ~1.0e-5 from 100
    assert errors[2] == pytest.approx((float(np.float32(100.001)) - 100) / 100, rel=1e-12)
    assert errors[3] == 0


# --------------------------------------------------------------------------- tut7 scripts


def tut7_lines(device: str, rows: int, cols: int, process: bool = False) -> list[str]:
    """What ``tut7.py --device DEVICE ROWS COLS`` prints: run as a user runs it when
    ``process``, else its ``main`` in this process (the same lines, without starting
    Python and loading the compiled kernels again)."""
    args = ("--device", device, str(rows), str(cols))
    if process:
        return run_script("tut7.py", *args)
    return call_main("tutorials/tut7.py", *args).stdout.splitlines()


@pytest.mark.parametrize(
    ("device", "rows", "cols", "split", "total", "worst"),
    [
        ("model-ipu2", 40, 50, 5, 123, 267),
        ("model-ipu1", 40, 50, 5, 123, 267),
        ("model-ipu2", 1000, 1000, 17, 580, 8135),
        ("model-ipu1", 1000, 1000, 14, 650, 8963),
    ],
)
def test_tut7_script_small_sizes(device, rows, cols, split, total, worst):
    lines = tut7_lines(device, rows, cols)
    assert lines[0] == "Best split chosen:"
    assert lines[1].startswith(f"colsAxisSplit={split}, total cost={total} (compute cost=")
    assert lines[2] == f"Worst cost seen: {worst}"
    assert lines[3] == "Multiplication result OK"
    assert any("Total cycles" in line for line in lines[4:]), "no profile summary printed"


# about 8 s each: under the 60 s that would make them slow
@pytest.mark.parametrize(
    ("device", "line"),
    [
        (
            "model-ipu2",
            "colsAxisSplit=7, total cost=3996 (compute cost=3696, exchange cost=143, "
            "reduce exchange cost=49, reduce compute cost=108)",
        ),
        (
            "model-ipu1",
            "colsAxisSplit=5, total cost=4751 (compute cost=4410, exchange cost=200, "
            "reduce exchange cost=45, reduce compute cost=96)",
        ),
    ],
)
def test_tut7_script_10000x1000(device, line):
    worst = {"model-ipu2": 53807, "model-ipu1": 64373}[device]
    # make run's command in a process of its own; the other device in this one
    lines = tut7_lines(device, 10000, 1000, process=device == "model-ipu2")
    assert lines[:4] == [
        "Best split chosen:",
        line,
        f"Worst cost seen: {worst}",
        "Multiplication result OK",
    ]


# --------------------------------------------------------------------------- tut7 simulated


def check_tut7_simulation(device_name: str, rows: int, cols: int) -> None:
    tut7 = tutorial("tut7")
    outcome = tut7.run(tut7.create_device(device_name), rows, cols, profile=False)
    assert outcome.ok
    np.testing.assert_allclose(outcome.result, matvec_expected(rows, cols), rtol=1e-5, atol=0)
    trace = outcome.engine.getTrace()
    assert trace is not None
    mul = compute_record(trace, "mulCS")
    red = compute_record(trace, "reduceCS")
    assert int(mul.tile_cycles.max()) == outcome.best.compute
    assert int(red.tile_cycles.max()) == outcome.best.reduce_compute


@pytest.mark.parametrize("device_name", ["model-ipu2", "model-ipu1"])
def test_tut7_slowest_tiles_match_the_cost_model_1000x1000(device_name):
    check_tut7_simulation(device_name, 1000, 1000)


@pytest.mark.slow
@pytest.mark.parametrize("device_name", ["model-ipu2", "model-ipu1"])
def test_tut7_slowest_tiles_match_the_cost_model_10000x1000(device_name):
    check_tut7_simulation(device_name, 10000, 1000)


# --------------------------------------------------------------------------- CPU vs IPU Model


def test_tut1_same_values_on_cpu_and_ipu_model(capsys):
    tut1 = tutorial("tut1")
    h3_cpu, _ = tut1.run(Device.createCPUDevice("ipu2"))
    out_cpu = capsys.readouterr().out
    h3_ipu, _ = tut1.run(IPUModel("ipu2").createDevice())
    out_ipu = capsys.readouterr().out
    np.testing.assert_array_equal(h3_cpu, h3_ipu)
    expected = np.zeros(16, np.float32)
    expected[5:8] = [1, 1.5, 2]  # row 1, columns 1..3
    np.testing.assert_array_equal(h3_ipu, expected)
    assert out_cpu == out_ipu
    assert "v4-1: {10,11,12,13,14,15,16,17,18,19}" in out_cpu.splitlines()


def test_tut3_same_values_on_cpu_and_ipu_model(capsys):
    tut3 = tutorial("tut3")
    v2_cpu, _ = tut3.run(Device.createCPUDevice("ipu2"))
    v2_ipu, _ = tut3.run(IPUModel("ipu2").createDevice())
    suffix_sums = np.cumsum([2.5, 2, 1.5, 1])[::-1]  # 7, 6, 4.5, 2.5
    np.testing.assert_array_equal(v2_cpu, suffix_sums)
    np.testing.assert_array_equal(v2_ipu, suffix_sums)
    out = capsys.readouterr().out.splitlines()
    assert out == ["v2: {7,6,4.5,2.5}", "v2: {7,6,4.5,2.5}"]


def test_tut6_same_values_on_cpu_and_ipu_model(capsys):
    tut6 = tutorial("tut6")
    res_cpu, ok_cpu, _ = tut6.run(Device.createCPUDevice("ipu2"), 40, 50)
    res_ipu, ok_ipu, _ = tut6.run(IPUModel("ipu2").createDevice(), 40, 50)
    assert ok_cpu and ok_ipu
    np.testing.assert_array_equal(res_cpu, res_ipu)
    # all partial sums are integers below 2**24, so float32 is exact here
    np.testing.assert_array_equal(res_ipu, matvec_expected(40, 50))


@pytest.mark.parametrize("device_name", ["model-ipu2", "model-ipu1"])
def test_tut7_same_values_on_cpu_and_ipu_model(capsys, device_name):
    tut7 = tutorial("tut7")
    cpu = tut7.run(tut7.create_device(device_name, cpu=True), 300, 200, profile=False)
    ipu = tut7.run(tut7.create_device(device_name), 300, 200, profile=False)
    assert cpu.ok and ipu.ok
    assert cpu.best == ipu.best
    np.testing.assert_array_equal(cpu.result, ipu.result)
    assert cpu.engine.getTrace() is None


# --------------------------------------------------------------------------- granularity


def model_device(granularity: str) -> Device:
    return IPUModel(load_config("mk2", overrides={"sim.granularity": granularity})).createDevice()


def assert_same_traces(a, b) -> None:
    assert [(r.kind, r.name, r.first_cycle, r.last_cycle) for r in a.records] == [
        (r.kind, r.name, r.first_cycle, r.last_cycle) for r in b.records
    ]
    for ra, rb in zip(a.records, b.records, strict=True):
        np.testing.assert_array_equal(ra.tile_cycles, rb.tile_cycles)
    assert a.fingerprint() == b.fingerprint()


def test_tut1_tut3_tut6_same_trace_per_ipu_and_per_tile(capsys):
    for name, args in (("tut1", ()), ("tut3", ()), ("tut6", (40, 50))):
        module = tutorial(name)
        traces, values = [], []
        for granularity in ("ipu", "tile"):
            result = module.run(model_device(granularity), *args)
            values.append(result[0])
            traces.append(result[-1].getTrace())
        np.testing.assert_array_equal(values[0], values[1])
        assert_same_traces(*traces)


def test_tut7_same_trace_per_ipu_and_per_tile():
    tut7 = tutorial("tut7")
    outcomes = []
    for granularity in ("ipu", "tile"):
        cfg = load_config("mk2", overrides={"sim.granularity": granularity})
        outcomes.append(tut7.run(tut7.create_device(IPUModel(cfg)), 40, 50, profile=False))
    np.testing.assert_array_equal(outcomes[0].result, outcomes[1].result)
    assert_same_traces(outcomes[0].engine.getTrace(), outcomes[1].engine.getTrace())


def test_tut7_host_product_is_the_float64_product_block_by_block():
    tut7 = tutorial("tut7")
    rng = np.random.default_rng(5)
    rows = 2 * tut7.HOST_BLOCK_ROWS + 37  # a partial last block
    matrix = rng.standard_normal((rows, 9)).astype(np.float32)
    vector = rng.standard_normal(9).astype(np.float32)
    want = np.array(
        [sum(float(a) * float(b) for a, b in zip(row, vector, strict=True)) for row in matrix]
    )
    got = tut7.host_product(matrix, vector)
    assert got.dtype == np.float64 and got.shape == (rows,)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
