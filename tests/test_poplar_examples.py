"""The ports of published Poplar programs in examples/poplar, run as a user runs them.

Expected lines are rebuilt here from what the originals document (the callback
protocol, the results their tests check, numpy's own printing of the expected values),
not read back from the scripts.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from examples_common import MainRun, call_main, load_example

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "poplar"


def run_script(
    name: str, *args: str, cwd: Path | None = None, status: int = 0
) -> subprocess.CompletedProcess[str]:
    """Run ``examples/poplar/<name>`` with ``args``; check its exit status."""
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=cwd,
    )
    assert proc.returncode == status, (
        f"{name} {' '.join(args)} exited with {proc.returncode}\n"
        f"--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-5000:]}"
    )
    return proc


def example(name: str) -> ModuleType:
    """``examples/poplar/<name>.py`` as a module."""
    return load_example(f"poplar/{name}.py")


def run_main(name: str, *args: str, status: int = 0) -> MainRun:
    """``main(args)`` of ``examples/poplar/<name>`` in this process (a variant of a
    command whose separate-process run is tested here too); check its return."""
    return call_main(f"poplar/{name}", *args, status=status)


# ------------------------------------------------------------------- prefetch
def test_prefetch_prints_the_callback_protocol():
    # Five runs of Repeat(5, {Copy(in), Execute, Copy(out)}); a new callback when the
    # value changes. Per run: the first copy fetches (prefetched data of the run
    # before was invalidated when it ended), every copy completes and is followed by
    # a prefetch of the next transfer, the last one speculative.
    expected: list[str] = []
    previous = None
    for value in (1, 3, 3, 9, 9):
        if value != previous:
            expected.append("Set input callback")
        expected.append("Running")
        expected.append(f"fetch (value: {value})")
        for _ in range(5):
            expected.append(f"complete (value: {value})")
            expected.append(f"prefetch (value: {value})")
        previous = value
    proc = run_script("prefetch.py")
    assert proc.stdout.splitlines() == expected
    # The words the original's test looks for.
    assert all(word in proc.stdout for word in ("Running", "complete", "prefetch"))


# ----------------------------------------------------------- advanced example
@pytest.mark.slow
def test_advanced_example_on_the_ipu_model():
    """Slow only because test_advanced_example_saves_and_loads_the_executable runs the
    same ``--model`` path (plus saving) in the default suite, with the same checks."""
    proc = run_script("advanced_example.py", "--model")
    assert proc.stderr.splitlines() == ["Using IPU model", "Results match."]
    assert proc.stdout == ""


def test_advanced_example_on_a_hardware_device():
    # The first free device of the idle simulated IPU system has id 0.
    proc = run_script("advanced_example.py")
    assert proc.stderr.splitlines() == ["Using HW device ID: 0", "Results match."]


def test_advanced_example_saves_and_loads_the_executable(tmp_path):
    name = str(tmp_path / "example")
    saved = run_script("advanced_example.py", "--model", "--save-exe", "--exe-name", name)
    assert saved.stderr.splitlines() == ["Using IPU model", "Results match."]
    assert saved.stdout == ""
    exe = tmp_path / "example.poplar"
    assert exe.read_bytes().startswith(b"IPUSIM-EXECUTABLE\n")
    # Loading skips building the graph and the programs: run from another directory.
    loaded = run_script(
        "advanced_example.py", "--model", "--load-exe", "--exe-name", name, cwd=tmp_path
    )
    assert loaded.stderr.splitlines() == ["Using IPU model", "Results match."]


def test_advanced_example_profile_summary(tmp_path):
    out = tmp_path / "profile.txt"
    run_main("advanced_example.py", "--model", "--profile", "--profile-name", str(out))
    text = out.read_text()
    assert "Number of IPUs:         1" in text
    # cs1 plus the reduction's compute sets
    assert "Number of compute sets:" in text


def test_advanced_example_errors(tmp_path):
    proc = run_main("advanced_example.py", "--model", "--load-exe", status=1)
    # The options are checked before a device is chosen.
    assert proc.stderr.splitlines() == [
        "Exception: To save/load an executable you must set 'exe-name'"
    ]
    proc = run_main(
        "advanced_example.py", "--model", "--load-exe", "--profile", "--exe-name", "x", status=1
    )
    assert proc.stderr.splitlines() == [
        "Exception: It is not possible to run profiling on a loaded executable."
    ]
    missing = str(tmp_path / "missing")
    proc = run_main("advanced_example.py", "--model", "--load-exe", "--exe-name", missing, status=1)
    lines = proc.stderr.splitlines()
    assert lines[:2] == ["Using IPU model", f"Error: Failed to load executable '{missing}.poplar'"]
    assert lines[2].startswith("Exception: ") and "missing.poplar" in lines[2]


# ------------------------------------------------------------------ leaky relu
def leaky_relu_lines(values: list[float], alpha: float, device_line: str) -> list[str]:
    """What the original's run_leaky_relu.py prints, computed with numpy."""
    x = np.array(values).astype(np.float32)
    out = np.where(x < 0, np.float32(alpha) * x, x).astype(np.float32)
    return [device_line, f"alpha={alpha}", f"X={x}", "RESULT X", str({"LeakyRelu:0": out})]


def test_leaky_relu_prints_the_anchors():
    values, alpha = [0.3, -2.7, 1.2, -5.0], 0.02
    proc = run_script("leaky_relu.py", *map(str, values))
    assert proc.stdout.splitlines() == leaky_relu_lines(values, alpha, "Running on IPU Model")
    # The form the original's test searches for.
    assert "{'LeakyRelu:0': array([" in proc.stdout and "dtype=float32)}" in proc.stdout


@pytest.mark.parametrize(
    ("args", "values", "alpha"),
    [
        (("--alpha", "0.01"), [0.3, -2.7, 1.2, -5.0], 0.01),
        (("--alpha", "5.0"), [-0.1, 0.1, 0.2, -1.2], 5.0),
    ],
)
def test_leaky_relu_prints_the_anchors_of_another_alpha(args, values, alpha):
    run = run_main("leaky_relu.py", *args, *map(str, values))
    assert run.stdout.splitlines() == leaky_relu_lines(values, alpha, "Running on IPU Model")
    assert "{'LeakyRelu:0': array([" in run.stdout and "dtype=float32)}" in run.stdout


def test_leaky_relu_on_a_hardware_device():
    proc = run_script("leaky_relu.py", "--ipu", "0.1")
    assert proc.stdout.splitlines() == leaky_relu_lines([0.1], 0.02, "IPU hardware device acquired")


def test_leaky_relu_gradient():
    module = example("leaky_relu")
    grad = [1.0, 2.0, 3.0, 4.0, -5.0]
    x = [-1.0, 1.0, -2.0, 0.0, -0.5]
    out = module.build_and_run_grad_graph(grad, x, 0.25)["LeakyReluGrad:0"]
    # d/dx leaky_relu = alpha where x < 0, else 1 (also at 0)
    np.testing.assert_array_equal(out, np.array([0.25, 2.0, 0.75, 4.0, -1.25], np.float32))


# ---------------------------------------------------------- RepeatWhileTrue
def countdown(a: int, b: int) -> tuple[int, int]:
    """Decrement both while neither is zero, as the device loop does."""
    while a != 0 and b != 0:
        a, b = a - 1, b - 1
    return a, b


def test_repeat_while_true_gives_the_checked_values():
    proc = run_script("repeat_while_true.py")
    # The original checks output[0] == 2 and output[1] == 0.
    assert countdown(10, 8) == (2, 0)
    assert proc.stdout.splitlines() == ["output: {2,0}"]


def test_repeat_while_true_other_start():
    proc = run_main("repeat_while_true.py", "--init", "3", "7")
    a, b = countdown(3, 7)
    assert proc.stdout.splitlines() == [f"output: {{{a},{b}}}"]


# ------------------------------------------------ lightweight profiling (InOut)
def test_implicit_blocks_print_one_line_per_execution():
    proc = run_script("lightweight_profiling_implicit_blocks.py")
    lines = proc.stdout.splitlines()
    assert len(lines) == 5
    assert all(line.startswith("operation: ") for line in lines)
    cycles = {int(line.split(": ")[1]) for line in lines}
    # one fixed estimate per execution (see the port's docstring)
    assert len(cycles) == 1


def test_implicit_blocks_match_the_trace_and_inout_state_persists():
    module = example("lightweight_profiling_implicit_blocks")
    device = module.getIpuHwDevice(1)
    try:
        engine = module.build(device, runs=1)
        # InOut state: 1 + 5 increments, kept in the tensor.
        assert module.iterations(engine) == 6
        records = engine.getTrace().records
        blocks = engine.getBlockRecords(0)
        # Each block is the tile-0 cycles of the compute set's steps: its sync and the
        # vertex estimate.
        per_exec = [r for r in records if r.name == "operation"]
        assert len(per_exec) == len(blocks) == 5
        for block, rec in zip(blocks, per_exec, strict=True):
            assert block["name"] == "operation"
            assert block["cycles"] == int(rec.tile_cycles[0])
            assert block["cycles"] >= module.CYCLES_PER_ITERATION
        engine.run()
        assert module.iterations(engine) == 11
        assert len(engine.getBlockRecords(0)) == 10
    finally:
        device.detach()


# --------------------------------------- lightweight profiling (Block, two IPUs)
def parse_block_lines(text: str) -> list[tuple[str, int, int, int]]:
    """``(name, cycles, from, to)`` of each line printed as example_1.cpp prints a block
    (``std::setw(10) << name << ": " << cycles << " (" << from << " - " << to << ")"``)."""
    rows = []
    for line in text.splitlines():
        head, _, rest = line.partition(": ")
        assert len(head) >= 10 and head == head.strip().rjust(10), line
        cycles, span = rest.split(" ", 1)
        assert span.startswith("(") and span.endswith(")"), line
        start, end = span[1:-1].split(" - ")
        rows.append((head.strip(), int(cycles), int(start), int(end)))
    return rows


@pytest.fixture(scope="module")
def two_ipus_run() -> subprocess.CompletedProcess[str]:
    """The two-IPU example run with its defaults (read by two tests)."""
    return run_script("lightweight_profiling_two_ipus.py")


def test_two_ipu_blocks_print_both_stages_with_nested_op2(two_ipus_run):
    proc = two_ipus_run
    rows = parse_block_lines(proc.stdout)
    # tile 0 of IPU 0 first (stage1 and its op2, five times), then IPU 1 (stage2)
    names = ["stage1", "op2"] * 5 + ["stage2", "op2"] * 5
    assert [r[0] for r in rows] == names
    for name, cycles, start, end in rows:
        assert cycles == end - start > 0, name
    for i in range(0, len(rows), 2):
        (_, _, s_from, s_to), (_, _, o_from, o_to) = rows[i], rows[i + 1]
        # each op2 lies inside its stage, and ends it (op2 is the stage's last program)
        assert s_from <= o_from < o_to == s_to
    # the pipeline is balanced: every stage and every op2 takes the same cycles
    assert len({r[1] for r in rows if r[0].startswith("stage")}) == 1
    assert len({r[1] for r in rows if r[0] == "op2"}) == 1
    assert proc.stderr == ""


def test_two_ipu_blocks_without_op_blocks(two_ipus_run):
    # The README's first listing: operations are plain Execute, filter "stage.*".
    proc = run_main(
        "lightweight_profiling_two_ipus.py", "--no-op-blocks", "--blocks-filter", "stage.*"
    )
    rows = parse_block_lines(proc.stdout)
    assert [r[0] for r in rows] == ["stage1"] * 5 + ["stage2"] * 5
    # no instrumentation cost is modelled: the stage takes what it takes with op2 blocks
    nested = parse_block_lines(two_ipus_run.stdout)
    assert [r[1:] for r in rows] == [r[1:] for r in nested if r[0] != "op2"]


def test_two_ipu_blocks_with_other_filters():
    proc = run_main("lightweight_profiling_two_ipus.py", "--blocks-filter", "op1", status=0)
    assert [r[0] for r in parse_block_lines(proc.stdout)] == ["op1"] * 10
    proc = run_main("lightweight_profiling_two_ipus.py", "--blocks-filter", "stage1", status=1)
    assert [r[0] for r in parse_block_lines(proc.stdout)] == ["stage1"] * 5
    assert proc.stderr.splitlines() == ["IPU 1: no block was recorded on its first tile"]


def test_two_ipu_blocks_match_the_trace():
    module = example("lightweight_profiling_two_ipus")
    device = module.getIpuHwDevice(2)
    try:
        engine, tpi = module.build(device)
    finally:
        device.detach()
    assert device.getTarget().getNumIPUs() == 2 and tpi == device.getTarget().getTilesPerIPU()
    trace = engine.getTrace()
    assert trace.records[-1].name == "EndOfRun/Sync"  # every run ends with a sync
    records = trace.records[:-1]
    # The steps of one Execute are named after its compute set ("op1", "op1/...");
    # consecutive steps of the same compute set are one execution of it.
    groups: list[tuple[str, int, int]] = []  # (compute set, first record, end record)
    for i, rec in enumerate(records):
        base = rec.name.split("/")[0]
        if groups and groups[-1][0] == base:
            groups[-1] = (base, groups[-1][1], i + 1)
        else:
            groups.append((base, i, i + 1))
    assert [g[0] for g in groups] == ["op1", "op2"] * 10
    # Per iteration: op1, op2 of IPU 0 (stage1), then op1, op2 of IPU 1 (stage2).
    for j, (_, a, b) in enumerate(groups):
        ipu = (j // 2) % 2
        cycles = np.array([r.tile_cycles for r in records[a:b]], np.int64)
        assert cycles[:, ipu * tpi].sum() >= module.VERTEX_CYCLES
        assert cycles[:, (1 - ipu) * tpi].sum() == 0  # the other IPU takes no part

    for ipu, stage in ((0, "stage1"), (1, "stage2")):
        tile = ipu * tpi
        on_tile = np.array([int(r.tile_cycles[tile]) for r in records], np.int64)
        clock = np.concatenate([[0], np.cumsum(on_tile)])  # tile clock before each step
        expected = []
        for k in range(module.REPEATS):
            op1, op2 = groups[4 * k + 2 * ipu], groups[4 * k + 2 * ipu + 1]
            # a block's cycles: the sum of the tile's cycles over the steps inside it
            expected.append((stage, clock[op1[1]], clock[op2[2]], on_tile[op1[1] : op2[2]].sum()))
            expected.append(("op2", clock[op2[1]], clock[op2[2]], on_tile[op2[1] : op2[2]].sum()))
        got = [
            (b["name"], b["cyclesFrom"], b["cyclesTo"], b["cycles"])
            for b in engine.getBlockRecords(tile)
        ]
        assert got == expected, f"IPU {ipu}"
        assert all(b["run"] == 0 for b in engine.getBlockRecords(tile))

    # Both IPUs' blocks are recorded, on the first tile of each IPU only (the vertices
    # are there); op1 is not selected by "stage.|op2".
    every = engine.getBlockRecords()
    assert {b["tile"] for b in every} == {0, tpi}
    assert {b["name"] for b in every} == {"stage1", "stage2", "op2"}
    # The stages share no step and wait for nothing: they run at the same time, so the
    # run takes five stages, not ten (then the sync that ends it).
    first = {b["name"]: b for b in reversed(every) if b["name"].startswith("stage")}
    assert first["stage1"]["cyclesFrom"] == first["stage2"]["cyclesFrom"] == 0
    stage_cycles = engine.getBlockRecords(0)[0]["cycles"]
    assert max(r.last_cycle for r in records) == module.REPEATS * stage_cycles
    assert trace.total_cycles == trace.records[-1].last_cycle
